package gateway

// advisorHub re-proves and re-bases a sandbox's pending proposals when
// what they were proved against changes, and wakes their watchers.
type advisorHub struct {
	s *Server
}

func newAdvisorHub(s *Server) *advisorHub { return &advisorHub{s: s} }

// contextChanged: the sandbox's boundary or credentialed hosts changed.
func (a *advisorHub) contextChanged(sandbox string) {}

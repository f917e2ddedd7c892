package gateway

import (
	"regexp"

	"github.com/prometheus/client_golang/prometheus"
)

var descName = regexp.MustCompile(`fqName: "([^"]+)"`)

// MetricNames returns the name of every metric s registers, whether or not
// it has a series yet (a histogram's name without _bucket, _sum, _count).
func (s *Server) MetricNames() []string {
	ch := make(chan *prometheus.Desc)
	go func() {
		for _, c := range s.metrics.all {
			c.Describe(ch)
		}
		close(ch)
	}()
	var names []string
	for d := range ch {
		if m := descName.FindStringSubmatch(d.String()); m != nil {
			names = append(names, m[1])
		}
	}
	return names
}

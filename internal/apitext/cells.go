package apitext

import (
	"fmt"
	"strings"
	"time"

	portcullisv1 "github.com/portcullis-dev/portcullis/proto/portcullis/v1"
)

// nackWidth bounds the NACK error shown in the proxies table (-o json has
// it whole).
const nackWidth = 48

// AppliedCell is the applied version, with the sandbox's current version
// when the proxy is behind it: "2 (current 3)".
func AppliedCell(p *portcullisv1.ProxyStatus) string {
	applied, current := p.GetAppliedVersion(), p.GetCurrentVersion()
	cell := VersionCell(applied)
	if current != 0 && applied != current {
		cell += fmt.Sprintf(" (current %d)", current)
	}
	return cell
}

// NackCell is "3: reason", the reason cut to fit a terminal.
func NackCell(p *portcullisv1.ProxyStatus) string {
	if p.GetLastNackVersion() == 0 && p.GetLastNackError() == "" {
		return "-"
	}
	return fmt.Sprintf("%d: %s", p.GetLastNackVersion(), Clip(p.GetLastNackError(), nackWidth))
}

// LagCell is the commit-to-ACK time of the applied version, "-" before
// the first ACK.
func LagCell(p *portcullisv1.ProxyStatus) string {
	if p.GetLastAckAt() == nil {
		return "-"
	}
	return (time.Duration(p.GetLagMs()) * time.Millisecond).String()
}

// BoundaryCell is the boundary's hash, "none" for a sandbox without one.
func BoundaryCell(s *portcullisv1.Sandbox) string {
	if s.GetBoundaryHash() == "" {
		return "none"
	}
	return s.GetBoundaryHash()
}

// CredentialedCell lists the credentialed hosts, "none" when there are none.
func CredentialedCell(s *portcullisv1.Sandbox) string {
	if len(s.GetCredentialedHosts()) == 0 {
		return "none"
	}
	return strings.Join(s.GetCredentialedHosts(), ", ")
}

// VersionCell is a version number, "-" for a sandbox without a policy.
func VersionCell(v uint32) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprint(v)
}

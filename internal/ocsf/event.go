package ocsf

import (
	"slices"

	"github.com/portcullis-dev/portcullis/internal/version"
)

// Version is the OCSF schema version every event is written in.
const Version = "1.8.0"

// The classes used here (OCSF 1.8.0).
const (
	ClassHTTPActivity     = 4002
	ClassAPIActivity      = 6003
	ClassApplicationError = 6008
	ClassEntityManagement = 3004
	ClassDetectionFinding = 2004
	ClassRemediation      = 7001
)

// classes are each class's name, category and category name.
var classes = map[int]struct {
	name         string
	category     int
	categoryName string
}{
	ClassHTTPActivity:     {"HTTP Activity", 4, "Network Activity"},
	ClassAPIActivity:      {"API Activity", 6, "Application Activity"},
	ClassApplicationError: {"Application Error", 6, "Application Activity"},
	ClassEntityManagement: {"Entity Management", 3, "Identity & Access Management"},
	ClassDetectionFinding: {"Detection Finding", 2, "Findings"},
	ClassRemediation:      {"Remediation Activity", 7, "Remediation"},
}

// Severities (severity_id).
const (
	SeverityUnknown       = 0
	SeverityInformational = 1
	SeverityLow           = 2
	SeverityMedium        = 3
	SeverityHigh          = 4
	SeverityCritical      = 5
)

// Event is one OCSF event. The fields every class has come first; the
// rest are set by the classes that define them and omitted otherwise.
// Time is milliseconds since the Unix epoch (OCSF timestamp_t).
type Event struct {
	ClassUID     int      `json:"class_uid"`
	ClassName    string   `json:"class_name,omitempty"`
	CategoryUID  int      `json:"category_uid"`
	CategoryName string   `json:"category_name,omitempty"`
	ActivityID   int      `json:"activity_id"`
	ActivityName string   `json:"activity_name,omitempty"`
	TypeUID      int      `json:"type_uid"`
	TypeName     string   `json:"type_name,omitempty"`
	Time         int64    `json:"time"`
	SeverityID   int      `json:"severity_id"`
	Severity     string   `json:"severity,omitempty"`
	StatusID     int      `json:"status_id,omitempty"`
	Status       string   `json:"status,omitempty"`
	StatusDetail string   `json:"status_detail,omitempty"`
	Message      string   `json:"message,omitempty"`
	Metadata     Metadata `json:"metadata"`
	// Observables point at the hosts, addresses and users the event
	// names, for a SIEM to pivot on (Finish fills them).
	Observables []Observable `json:"observables,omitempty"`
	// Count, StartTime and EndTime make an event stand for that many of
	// the same kind between those times (a summary of a flood).
	Count     int64 `json:"count,omitempty"`
	StartTime int64 `json:"start_time,omitempty"`
	EndTime   int64 `json:"end_time,omitempty"`

	// security_control profile: what the boundary did.
	ActionID      int           `json:"action_id,omitempty"`
	Action        string        `json:"action,omitempty"`
	DispositionID int           `json:"disposition_id,omitempty"`
	Disposition   string        `json:"disposition,omitempty"`
	FirewallRule  *FirewallRule `json:"firewall_rule,omitempty"`
	Policy        *Policy       `json:"policy,omitempty"`

	// Network and application classes.
	Actor       *Actor       `json:"actor,omitempty"`
	SrcEndpoint *Endpoint    `json:"src_endpoint,omitempty"`
	DstEndpoint *Endpoint    `json:"dst_endpoint,omitempty"`
	HTTPRequest *HTTPRequest `json:"http_request,omitempty"`
	API         *API         `json:"api,omitempty"`
	Resources   []Resource   `json:"resources,omitempty"`

	// Entity Management.
	Entity       *ManagedEntity `json:"entity,omitempty"`
	EntityResult *ManagedEntity `json:"entity_result,omitempty"`
	Comment      string         `json:"comment,omitempty"`

	// Detection Finding.
	FindingInfo *FindingInfo `json:"finding_info,omitempty"`
	IsAlert     *bool        `json:"is_alert,omitempty"`
	// ConfidenceID (1 Low, 2 Medium, 3 High) and ConfidenceScore (0-100)
	// are how sure the finding's author is.
	ConfidenceID    int  `json:"confidence_id,omitempty"`
	ConfidenceScore *int `json:"confidence_score,omitempty"`

	// Remediation Activity: the command's id, the D3FEND countermeasure
	// and what was done.
	CommandUID      string       `json:"command_uid,omitempty"`
	Countermeasures []D3FEND     `json:"countermeasures,omitempty"`
	Remediation     *Remediation `json:"remediation,omitempty"`

	// Unmapped holds what OCSF has no attribute for (a denial's id, the
	// sandbox, reason codes), under our own names.
	Unmapped map[string]any `json:"unmapped,omitempty"`
}

// Metadata is the event's metadata object.
type Metadata struct {
	Version  string   `json:"version"`
	Product  Product  `json:"product"`
	Profiles []string `json:"profiles,omitempty"`
	// UID is the event's own id where it has one (a denial's id, an audit
	// entry's hash); CorrelationUID joins events (a trace id).
	UID            string `json:"uid,omitempty"`
	CorrelationUID string `json:"correlation_uid,omitempty"`
	// LoggedTime is when Portcullis received what the event reports
	// (milliseconds), where another party wrote it (a Sentry event).
	LoggedTime int64 `json:"logged_time,omitempty"`
	// Sequence is the event's place in its sender's stream (a Sentry
	// source's sequence); EventCode its type there.
	Sequence  uint64 `json:"sequence,omitempty"`
	EventCode string `json:"event_code,omitempty"`
}

// Product names what wrote the event: Portcullis's gateway or proxy.
type Product struct {
	Name       string   `json:"name"`
	VendorName string   `json:"vendor_name"`
	Version    string   `json:"version,omitempty"`
	Feature    *Feature `json:"feature,omitempty"`
}

// Feature is the product's part that wrote the event.
type Feature struct {
	Name string `json:"name"`
}

// Products writing events, at the running build's version
// (internal/version: a release tag, a pseudo-version, or "devel").
var (
	Gateway = Product{Name: "Portcullis", VendorName: "Portcullis", Version: version.Get().String(), Feature: &Feature{Name: "gateway"}}
	Proxy   = Product{Name: "Portcullis", VendorName: "Portcullis", Version: version.Get().String(), Feature: &Feature{Name: "proxy"}}
)

// Observable is an OCSF observable: Name is the path of the attribute it
// points at (dst_endpoint.hostname), TypeID its type from the OCSF
// dictionary.
type Observable struct {
	Name   string `json:"name"`
	TypeID int    `json:"type_id"`
	Type   string `json:"type,omitempty"`
	Value  string `json:"value,omitempty"`
}

// Observable type_ids (OCSF dictionary types).
const (
	ObservableHostname = 1 // hostname_t
	ObservableIP       = 2 // ip_t
	ObservableUserName = 4 // username_t
)

// FirewallRule is the policy rule behind a decision.
type FirewallRule struct {
	Name string `json:"name,omitempty"`
	UID  string `json:"uid,omitempty"`
}

// Policy is a policy object (a sandbox's policy, at a version).
type Policy struct {
	Name    string `json:"name,omitempty"`
	UID     string `json:"uid,omitempty"`
	Version string `json:"version,omitempty"`
}

// Actor is who did it: a person or token (User), or, for the proxy, the
// calling binary (AppName).
type Actor struct {
	AppName string `json:"app_name,omitempty"`
	User    *User  `json:"user,omitempty"`
}

// User is a token's name.
type User struct {
	Name string `json:"name,omitempty"`
	Type string `json:"type,omitempty"`
}

// Endpoint is a network endpoint.
type Endpoint struct {
	Name     string `json:"name,omitempty"`
	Hostname string `json:"hostname,omitempty"`
	IP       string `json:"ip,omitempty"`
	Port     int    `json:"port,omitempty"`
	SvcName  string `json:"svc_name,omitempty"`
}

// HTTPRequest is the request a decision judged.
type HTTPRequest struct {
	HTTPMethod string `json:"http_method,omitempty"`
	URL        *URL   `json:"url,omitempty"`
}

// URL is the request's target.
type URL struct {
	URLString string `json:"url_string,omitempty"`
	Hostname  string `json:"hostname,omitempty"`
	Port      int    `json:"port,omitempty"`
	Path      string `json:"path,omitempty"`
}

// API is an MCP call: the method as the operation, the server as the
// service.
type API struct {
	Operation string   `json:"operation"`
	Service   *Service `json:"service,omitempty"`
}

// Service names the MCP server.
type Service struct {
	Name string `json:"name,omitempty"`
}

// Resource is what an MCP call names (a tool, prompt or resource URI),
// or what a finding is about (a sandbox, a tool).
type Resource struct {
	Name string         `json:"name,omitempty"`
	UID  string         `json:"uid,omitempty"`
	Type string         `json:"type,omitempty"`
	Data map[string]any `json:"data,omitempty"`
}

// D3FEND is a countermeasure by its MITRE D3FEND tactic and technique.
type D3FEND struct {
	Tactic    *D3FENDEntity `json:"d3f_tactic,omitempty"`
	Technique *D3FENDEntity `json:"d3f_technique,omitempty"`
}

// D3FENDEntity names a D3FEND tactic or technique.
type D3FENDEntity struct {
	Name string `json:"name,omitempty"`
	UID  string `json:"uid,omitempty"`
}

// Remediation says what a remediation did, or why it did nothing.
type Remediation struct {
	Desc string `json:"desc"`
}

// ManagedEntity is what an audit entry changed, before or after.
type ManagedEntity struct {
	Name    string         `json:"name,omitempty"`
	UID     string         `json:"uid,omitempty"`
	Type    string         `json:"type,omitempty"`
	TypeID  int            `json:"type_id,omitempty"`
	Version string         `json:"version,omitempty"`
	Data    map[string]any `json:"data,omitempty"`
}

// FindingInfo describes a Detection Finding.
type FindingInfo struct {
	UID   string   `json:"uid"`
	Title string   `json:"title,omitempty"`
	Desc  string   `json:"desc,omitempty"`
	Types []string `json:"types,omitempty"`
	// CreatedTime is milliseconds since the Unix epoch.
	CreatedTime int64 `json:"created_time,omitempty"`
}

// SetClass sets the event's class (one of the Class constants) and
// activity, and the numbers and names derived from them: category,
// type_uid = class_uid*100 + activity_id, and type_name, type_uid's
// caption as OCSF's validator expects of the sibling: for activity 99
// (Other), whose activity_name is our own word (Approve, Invoke…), it is
// "CLASS: Other".
func (e *Event) SetClass(class, activity int, activityName string) {
	c := classes[class]
	e.ClassUID, e.ClassName = class, c.name
	e.CategoryUID, e.CategoryName = c.category, c.categoryName
	e.ActivityID, e.ActivityName = activity, activityName
	e.TypeUID = class*100 + activity
	e.TypeName = c.name + ": " + activityName
	if activity == 99 {
		e.TypeName = c.name + ": Other"
	}
}

var severityNames = map[int]string{0: "Unknown", 1: "Informational", 2: "Low", 3: "Medium", 4: "High", 5: "Critical", 6: "Fatal"}

// SetSeverity sets severity_id and its caption.
func (e *Event) SetSeverity(id int) {
	e.SeverityID, e.Severity = id, severityNames[id]
}

// SetStatus sets the outcome: Success or Failure, and its detail.
func (e *Event) SetStatus(ok bool, detail string) {
	if ok {
		e.StatusID, e.Status = 1, "Success"
	} else {
		e.StatusID, e.Status = 2, "Failure"
	}
	e.StatusDetail = detail
}

// Profiles an event declares in metadata.profiles.
const (
	ProfileSecurityControl = "security_control"
	ProfileHost            = "host"
)

// Finish declares in metadata.profiles every profile whose attributes the
// event carries (OCSF's validator refuses a profile's attribute the event
// does not declare), and points observables at its hosts, addresses and
// users. Every mapping calls it last, here and in the gateway's
// (internal/ocsf/gatewayocsf).
//
// security_control brings action, disposition, firewall_rule and policy
// to every class, and is_alert and confidence to classes other than
// Detection Finding (which defines those itself); host brings actor to
// classes that do not define it (HTTP Activity, Remediation Activity).
func (e *Event) Finish() {
	need := func(p string) {
		if !slices.Contains(e.Metadata.Profiles, p) {
			e.Metadata.Profiles = append(e.Metadata.Profiles, p)
		}
	}
	finding := e.ClassUID == ClassDetectionFinding
	if e.ActionID != 0 || e.Action != "" || e.DispositionID != 0 || e.Disposition != "" || e.FirewallRule != nil || e.Policy != nil ||
		!finding && (e.IsAlert != nil || e.ConfidenceID != 0 || e.ConfidenceScore != nil) {
		need(ProfileSecurityControl)
	}
	if e.Actor != nil && e.ClassUID != ClassAPIActivity && e.ClassUID != ClassEntityManagement {
		need(ProfileHost)
	}
	e.Observables = nil
	add := func(name string, typeID int, typ, value string) {
		if value != "" {
			e.Observables = append(e.Observables, Observable{Name: name, TypeID: typeID, Type: typ, Value: value})
		}
	}
	for _, ep := range []struct {
		name string
		ep   *Endpoint
	}{{"src_endpoint", e.SrcEndpoint}, {"dst_endpoint", e.DstEndpoint}} {
		if ep.ep != nil {
			add(ep.name+".hostname", ObservableHostname, "Hostname", ep.ep.Hostname)
			add(ep.name+".ip", ObservableIP, "IP Address", ep.ep.IP)
		}
	}
	if e.Actor != nil && e.Actor.User != nil {
		add("actor.user.name", ObservableUserName, "User Name", e.Actor.User.Name)
	}
}

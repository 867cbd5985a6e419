package cluster

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
)

// Paths of the node endpoint (kiln serve --cluster-addr).
const (
	// PathEnroll is the one call without a client certificate: a join
	// token and a certificate request in, the node's certificate out.
	PathEnroll = "/v1/enroll"
	// PathSession is the node's long-lived session: messages up (Hello,
	// then Heartbeats), messages down (Welcome, Acks; commands in a later
	// phase), one JSON object a line each way, on one HTTP/2 stream.
	PathSession = "/v1/session"
	// PathRenew renews a node's certificate, with its current one: a
	// certificate request for a new key in, the new certificate out
	// (accepted next to the current one until the node uses it).
	PathRenew = "/v1/renew"
)

// Error codes of the node endpoint's answers ({"error", "code"}, as the
// client API's).
const (
	CodeInvalidJoinToken = "INVALID_JOIN_TOKEN" // 403: unknown, wrong, expired or used
	CodeInvalidCSR       = "INVALID_CSR"        // 400
	CodeNotMember        = "NODE_NOT_MEMBER"    // 403: no certificate, or one of a node removed or re-enrolled
	CodeValidation       = "VALIDATION_ERROR"   // 400
	CodeNotFound         = "NOT_FOUND"          // 404
	CodeUnavailable      = "UNAVAILABLE"        // 503: the control plane cannot answer now
	CodeInternal         = "INTERNAL"           // 500
)

// MaxMessage bounds one message (one line) of a session, and the
// enrollment request's body.
const MaxMessage = 64 << 10

// ErrorBody is every error answer of the node endpoint.
type ErrorBody struct {
	Error string `json:"error"`
	Code  string `json:"code"`
}

// EnrollRequest is the body of PathEnroll.
type EnrollRequest struct {
	Token string `json:"token"` // the whole join token
	CSR   string `json:"csr"`   // PEM "CERTIFICATE REQUEST"
}

// EnrollResponse answers PathEnroll.
type EnrollResponse struct {
	Node        string `json:"node"`
	Certificate string `json:"certificate"` // PEM: the node's certificate
	CA          string `json:"ca"`          // PEM: the CA's certificate, to pin
}

// RenewRequest is the body of PathRenew.
type RenewRequest struct {
	CSR string `json:"csr"` // PEM "CERTIFICATE REQUEST" of a new key
}

// RenewResponse answers PathRenew.
type RenewResponse struct {
	Certificate string `json:"certificate"` // PEM
}

// RenewDue says whether a node certificate valid from notBefore to
// notAfter should be renewed at now: when less than a third of its life
// is left (four months of a year).
func RenewDue(notBefore, notAfter, now time.Time) bool {
	return notAfter.Sub(now) < notAfter.Sub(notBefore)/3
}

// Up is a message from the node to the control plane.
type Up struct {
	Type      string     `json:"type"` // "hello", "heartbeat"
	Hello     *Hello     `json:"hello,omitempty"`
	Heartbeat *Heartbeat `json:"heartbeat,omitempty"`
}

// Down is a message from the control plane to the node.
type Down struct {
	Type    string   `json:"type"` // "welcome", "ack"
	Welcome *Welcome `json:"welcome,omitempty"`
	Seq     int64    `json:"seq,omitempty"` // of the heartbeat an ack acknowledges
}

// Message types.
const (
	TypeHello     = "hello"
	TypeHeartbeat = "heartbeat"
	TypeWelcome   = "welcome"
	TypeAck       = "ack"
)

// Hello is what a node says of itself when a session opens.
type Hello struct {
	Version    string `json:"version"`
	PublicHost string `json:"public_host"`
	SFTPAddr   string `json:"sftp_addr"`
	PortFirst  int    `json:"port_first"`
	PortLast   int    `json:"port_last"`
	Runtime    string `json:"runtime"`
}

// Validate refuses what no honest agent sends: a compromised game host
// must not put arbitrary text into the operator's node list.
func (h Hello) Validate() error {
	var errs []error
	if len(h.Version) == 0 || len(h.Version) > 64 || !printable(h.Version) {
		errs = append(errs, errors.New("version: want 1-64 printable characters"))
	}
	if len(h.PublicHost) == 0 || len(h.PublicHost) > 253 || !printable(h.PublicHost) || strings.ContainsAny(h.PublicHost, " /") {
		errs = append(errs, errors.New("public_host: want a host name or address"))
	}
	if _, port, err := net.SplitHostPort(h.SFTPAddr); err != nil || len(h.SFTPAddr) > 260 || !printable(h.SFTPAddr) {
		errs = append(errs, errors.New("sftp_addr: want HOST:PORT"))
	} else if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		errs = append(errs, errors.New("sftp_addr: want a port of 0-65535"))
	}
	if h.PortFirst < 1 || h.PortLast > 65535 || h.PortFirst > h.PortLast {
		errs = append(errs, errors.New("port_first, port_last: want 1 <= first <= last <= 65535"))
	}
	if h.Runtime != "process" && h.Runtime != "docker" {
		errs = append(errs, errors.New("runtime: want process or docker"))
	}
	return errors.Join(errs...)
}

// Heartbeat is a node's report, every Welcome.HeartbeatInterval.
type Heartbeat struct {
	Seq         int64 `json:"seq"`
	MemoryTotal int64 `json:"memory_total"` // bytes
	MemoryFree  int64 `json:"memory_free"`  // bytes the host could still give (MemAvailable)
	DiskTotal   int64 `json:"disk_total"`   // bytes, of the file system of the node's data dir
	DiskFree    int64 `json:"disk_free"`
	// PortsBusy are the ports of the node's range that something on the
	// host listens on (/proc/net/tcp{,6}); the control plane counts the
	// free ones with the servers it placed there.
	PortsBusy []int `json:"ports_busy"`
}

// Validate refuses impossible values.
func (h Heartbeat) Validate(first, last int) error {
	if h.MemoryTotal < 0 || h.MemoryFree < 0 || h.DiskTotal < 0 || h.DiskFree < 0 {
		return errors.New("heartbeat: negative sizes")
	}
	if len(h.PortsBusy) > last-first+1 {
		return errors.New("heartbeat: more busy ports than the range holds")
	}
	for _, p := range h.PortsBusy {
		if p < first || p > last {
			return fmt.Errorf("heartbeat: busy port %d outside the range %d-%d", p, first, last)
		}
	}
	return nil
}

// Welcome opens a session's answer.
type Welcome struct {
	Node string `json:"node"`
	// HeartbeatIntervalMS is how often the control plane wants a
	// heartbeat: it decides, from how soon it calls a silent node
	// unreachable.
	HeartbeatIntervalMS int64 `json:"heartbeat_interval_ms"`
	// BlobMarker names the object the control plane wrote into its blob
	// store, for the agent to prove it sees the same store (nil: the
	// control plane has none to show).
	BlobMarker *BlobMarker `json:"blob_marker,omitempty"`
}

// BlobMarker is an object of random bytes the control plane wrote into
// its blob store (once: replicas sharing the store share it), by key and
// the SHA-256 of its bytes. An agent that reads the same bytes under the
// key through its own --blob-url sees the same store.
type BlobMarker struct {
	Key    string `json:"key"`
	SHA256 string `json:"sha256"` // lower-case hex
}

// MarkerKey is the blob key of the cluster's marker.
const MarkerKey = "cluster/marker"

// HeartbeatInterval is the interval a control plane asks for when it
// calls a node unreachable after unreachableAfter of silence: a sixth of
// it, at most 5 s (30 s → 5 s), so five beats can be lost first.
func HeartbeatInterval(unreachableAfter time.Duration) time.Duration {
	return min(max(unreachableAfter/6, 50*time.Millisecond), 5*time.Second)
}

func printable(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return false
		}
	}
	return true
}

package schema

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"
)

// Self-enrollment with bootstrap tokens.
//
// An operator creates a bootstrap token (`fleet token create`): labels that
// every device enrolling with it gets, an expiry and a number of uses. The
// token goes onto an SD-card image; each device's agent derives its own name
// and asks the hub, over MQTT, for a device of that name and its own token:
//
//	bootstrap client (username "bootstrap.<token id>", password the token,
//	client ID = a random request ID "req_…")
//	  SUBSCRIBE {prefix}/enroll/{requestID}/response
//	  PUBLISH   {prefix}/enroll/{requestID}/request   EnrollRequest  (QoS 1)
//	hub
//	  PUBLISH   {prefix}/enroll/{requestID}/response  EnrollResponse (QoS 1, not retained)
//
// A bootstrap client may publish only to its own request topic and subscribe
// only to its own response topic: "its own" is the one named by its MQTT
// client ID, which no other client may hold at the same time. The request
// repeats the bootstrap token, so the hub checks it whichever broker carried
// the message.

// Enrollment topic kinds under {prefix}/enroll/{requestID}/.
const (
	TopicEnrollRequest  = "request"
	TopicEnrollResponse = "response"
)

// Kinds of the enrollment payloads.
const (
	KindEnrollRequest  = "EnrollRequest"
	KindEnrollResponse = "EnrollResponse"
)

// MaxEnrollPayload bounds an EnrollRequest; the hub ignores larger ones.
const MaxEnrollPayload = 4 << 10

// Enroll returns prefix/enroll/{requestID}/{kind}.
func (t Topics) Enroll(requestID, kind string) string {
	return t.prefix() + "/enroll/" + requestID + "/" + kind
}

// EnrollRequestFilter is the hub's subscription to every enrollment
// request: prefix/enroll/+/request.
func (t Topics) EnrollRequestFilter() string {
	return t.Enroll("+", TopicEnrollRequest)
}

// ParseEnroll splits prefix/enroll/{requestID}/{kind}; the request ID must
// be valid (ValidateRequestID).
func (t Topics) ParseEnroll(topic string) (requestID, kind string, err error) {
	rest, ok := strings.CutPrefix(topic, t.prefix()+"/enroll/")
	if !ok {
		return "", "", fmt.Errorf("topic %q: not under %s/enroll/", topic, t.prefix())
	}
	requestID, kind, ok = strings.Cut(rest, "/")
	if !ok || strings.Contains(kind, "/") || (kind != TopicEnrollRequest && kind != TopicEnrollResponse) {
		return "", "", fmt.Errorf("topic %q: want %s/enroll/{requestID}/request or /response", topic, t.prefix())
	}
	if err := ValidateRequestID(requestID); err != nil {
		return "", "", fmt.Errorf("topic %q: %w", topic, err)
	}
	return requestID, kind, nil
}

var (
	requestIDPattern      = regexp.MustCompile(`^req_[A-Za-z0-9_-]{16,64}$`)
	bootstrapTokenPattern = regexp.MustCompile(`^([a-z0-9]{6})\.([a-z0-9]{32})$`)
	bootstrapIDPattern    = regexp.MustCompile(`^[a-z0-9]{6}$`)
)

// RequestIDPrefix starts every enrollment request ID. A '_' never appears
// in a device name, so a bootstrap client can never hold the client ID of
// a device (agents use their device name) and keep it from connecting.
const RequestIDPrefix = "req_"

// ValidateRequestID checks an enrollment request ID (also the bootstrap
// client's MQTT client ID): "req_" and 16 to 64 letters, digits, '-' or
// '_'. Clients use 128 random bits or more, so that no one can guess
// another's.
func ValidateRequestID(id string) error {
	if !requestIDPattern.MatchString(id) {
		return fmt.Errorf("request ID %q: want %s and 16 to 64 letters, digits, '-' or '_'", truncate(id), RequestIDPrefix)
	}
	return nil
}

// BootstrapUsernamePrefix starts the MQTT username of a bootstrap token. A
// '.' never appears in a device or credential name (DNS-1123 labels), so
// bootstrap usernames never collide with them.
const BootstrapUsernamePrefix = "bootstrap."

// BootstrapUsername is the MQTT username a client presents with a bootstrap
// token: "bootstrap." + the token's ID.
func BootstrapUsername(id string) string { return BootstrapUsernamePrefix + id }

// ParseBootstrapToken splits a bootstrap token "<id>.<secret>" (6 and 32
// lower-case letters or digits) and returns its public ID.
func ParseBootstrapToken(token string) (id string, err error) {
	m := bootstrapTokenPattern.FindStringSubmatch(token)
	if m == nil {
		// Never echo the token: it is a secret even when malformed.
		return "", errors.New("not a bootstrap token: want <6 letters or digits>.<32 letters or digits>")
	}
	return m[1], nil
}

// ValidateBootstrapTokenID checks the public ID of a bootstrap token.
func ValidateBootstrapTokenID(id string) error {
	if !bootstrapIDPattern.MatchString(id) {
		return fmt.Errorf("bootstrap token ID %q: want 6 lower-case letters or digits", truncate(id))
	}
	return nil
}

// EnrollRequest is what a bootstrap client publishes on its request topic.
type EnrollRequest struct {
	TypeMeta `json:",inline"`
	// Token is the bootstrap token.
	Token string `json:"token"`
	// Secret is random (32 bytes or more, base64url) and stays the same
	// when the client sends the same request again (it lost the answer):
	// only a request with the same ID and secret, for the same device,
	// shortly after, gets that device's token again.
	Secret string `json:"secret"`
	// Device is the name the device asks for.
	Device string `json:"device"`
	// PublicKey is the device's X25519 public key (DeviceStatus.publicKey),
	// if the agent has one already.
	PublicKey string `json:"publicKey,omitempty"`
	// CSR is a PEM certificate signing request for the device's client
	// certificate (CommonName: Device), if the agent makes one. A hub
	// with its own CA answers with the certificate (Certificate).
	CSR string `json:"csr,omitempty"`
}

// Enrollment refusal reasons (EnrollResponse.Reason).
const (
	// EnrollUnauthorized: unknown, deleted or wrong bootstrap token.
	EnrollUnauthorized = "Unauthorized"
	// EnrollExpired: the bootstrap token has expired.
	EnrollExpired = "Expired"
	// EnrollUsedUp: the bootstrap token has no uses left.
	EnrollUsedUp = "UsedUp"
	// EnrollNameTaken: a device (or credential) of that name exists; an
	// existing device is never given a token through enrollment.
	EnrollNameTaken = "NameTaken"
	// EnrollInvalid: a malformed request (bad device name, no secret…).
	EnrollInvalid = "Invalid"
	// EnrollRequestReused: the request ID was used before, by another
	// request.
	EnrollRequestReused = "RequestReused"
	// EnrollInternalError: the hub failed; the client may try again.
	EnrollInternalError = "InternalError"
)

// EnrollResponse is the hub's answer on the response topic: the device's
// name and its own token, or a refusal (Reason and Message).
type EnrollResponse struct {
	TypeMeta `json:",inline"`
	// Device is the name the device asked to enroll under.
	Device string `json:"device"`
	// Token is the device's MQTT password; present only on success.
	Token string `json:"token,omitempty"`
	// Reason says why the hub refused: Unauthorized, Expired, UsedUp,
	// NameTaken, Invalid, RequestReused or InternalError; empty on success.
	Reason string `json:"reason,omitempty"`
	// Message explains a refusal to a person.
	Message string `json:"message,omitempty"`
	// SigningKey is the hub's public key for signed desired states
	// (base64 std; schema/signature.go), on success: the agent pins it.
	SigningKey string `json:"signingKey,omitempty"`
	// SigningKeyID is SigningKeyID of SigningKey.
	SigningKeyID string `json:"signingKeyId,omitempty"`
	// Certificate is the device's client certificate (PEM), signed by the
	// hub's CA for the request's CSR: CommonName the device's name, client
	// authentication only, one year. Present on success when the request
	// had a CSR and the hub has its own CA.
	Certificate string `json:"certificate,omitempty"`
	// CA is the PEM of the CA that signed Certificate.
	CA string `json:"ca,omitempty"`
}

// ---- HTTP API: /v1/devices/{name}/certificate --------------------------------

// DeviceCertificateRequest is the body of POST
// /v1/devices/{name}/certificate.
type DeviceCertificateRequest struct {
	// CSR is a PEM certificate signing request whose CommonName is the
	// device's name (the agent writes one as <state-dir>/client.csr).
	CSR string `json:"csr"`
}

// DeviceCertificate is the answer of POST /v1/devices/{name}/certificate:
// the device's client certificate, as enrollment gives it.
type DeviceCertificate struct {
	Device string `json:"device"`
	// Certificate is the PEM client certificate: put it in the device's
	// state directory as client.crt.
	Certificate string `json:"certificate"`
	// NotAfter is when it expires.
	NotAfter time.Time `json:"notAfter"`
	// CA is the PEM of the CA that signed it.
	CA string `json:"ca"`
}

// ---- HTTP API: /v1/bootstrap-tokens ------------------------------------------

// BootstrapTokenRequest is the body of POST /v1/bootstrap-tokens.
type BootstrapTokenRequest struct {
	Description string            `json:"description,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	// TTL is a Go duration ("24h"); "0" (or "0s") means it never expires.
	// Default 24h.
	TTL string `json:"ttl,omitempty"`
	// Uses is how many devices may enroll with the token; 0 means no
	// limit.
	Uses int `json:"uses,omitempty"`
}

// BootstrapToken describes a bootstrap token. Token, the secret itself, is
// set only in the answer that creates it: the hub keeps its hash.
type BootstrapToken struct {
	ID          string            `json:"id"`
	Token       string            `json:"token,omitempty"`
	Description string            `json:"description,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	// Expires is nil for a token that never expires.
	Expires *time.Time `json:"expires,omitempty"`
	// Uses is the limit (0: none); Used counts the devices enrolled.
	Uses    int       `json:"uses"`
	Used    int       `json:"used"`
	Created time.Time `json:"created"`
	// Status is Active, Expired or UsedUp, as of the answer.
	Status string `json:"status"`
	// CAHash pins the hub's CA (CAHash), set only in the answer that
	// creates the token, when the hub has its own CA: give it to the
	// agent (--ca-hash) with the token, so that the device verifies the
	// hub on its first contact.
	CAHash string `json:"caHash,omitempty"`
}

// Bootstrap token statuses.
const (
	BootstrapActive  = "Active"
	BootstrapExpired = "Expired"
	BootstrapUsedUp  = "UsedUp"
)

// BootstrapTokenList is the body of GET /v1/bootstrap-tokens.
type BootstrapTokenList struct {
	Items []BootstrapToken `json:"items"`
}

// ValidateBootstrapLabels checks the labels of a bootstrap token: valid
// keys and values, none under the hub's fleet/ prefix.
func ValidateBootstrapLabels(labels map[string]string) []FieldError {
	var errs errList
	validateLabels(labels, "labels", &errs)
	for k := range labels {
		if strings.HasPrefix(k, LabelPrefix) {
			errs.add("labels", "key %q: labels under %s belong to the hub", truncate(k), LabelPrefix)
		}
	}
	return errs
}

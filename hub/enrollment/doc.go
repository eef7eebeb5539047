// Package enrollment is the hub's side of device enrollment
// (schema/enroll.go, hub/API.md "Self-enrollment"): a bootstrap client, logged
// in to the broker as bootstrap.<id> with a bootstrap token, publishes an
// EnrollRequest on its own request topic; the Handler answers on the
// matching response topic, at QoS 1, never retained.
//
// The contract of an answer:
//
//   - The request repeats the bootstrap token, so the check does not
//     depend on which broker carried it; the store creates the device,
//     issues its token and spends a use of the bootstrap token in one
//     transaction (store.Enroll). A retried request within the store's
//     retry window gets a new token for the same device.
//   - A refusal carries one of the schema.Enroll* reasons and a message
//     that says what to do; it never echoes the bootstrap token, and the
//     hub never logs a token.
//   - A CSR is checked before a use is spent; a certificate that fails to
//     sign after the device exists leaves it enrolled, without one.
//   - With a signer, the answer carries the hub's signing key, which the
//     device pins; with a ClientCA, the device's client certificate and
//     the CA.
//   - Each enrollment and each refusal of a request that names a bootstrap
//     token is given to Options.Audit.
//
// Package hub subscribes the Handler once its MQTT connection exists.
package enrollment

// Package remote carries the hub's side of requests to devices (logs,
// exec, top, see schema/remote.go): a Manager that publishes Requests on
// a device's requests topic, receives the device's Responses on its
// responses topic and relays them, with flow control, to the HTTP client
// that asked; and the HTTP routes that expose them (hub/API.md,
// "Requests to devices").
//
// Every request, the follow-ups of a stream included, is signed with the
// hub's key (Options.Signer, the key devices pin) with its own nonce and
// expiry (schema/requestsig.go), in one place (Manager.send): a device
// acts on nothing else. A device's refusal (schema.CodeUnauthenticated)
// of the hub's own request is a 502 RequestRefused, a Warning event and
// an audit entry; one of a request the hub never sent it betrays another
// publisher on its requests topic, and is counted and made an event.
//
// A response is accepted only if it decodes, its ID is an operation the
// hub has open, and both the device of its topic and the device it names
// are the operation's device; anything else is counted
// (fleet_remote_responses_dropped_total) and logged at a limited rate,
// never with its payload. The hub holds at most Window responses per
// stream (each at most schema.MaxChunkBytes): a device that sends more
// than the window it was given is cut off.
//
// Every operation lives in the HTTP handler's goroutine (exec adds one
// that reads the client's frames): nothing outlives the request, and
// every stream ends when the hub shuts down (Manager.Stop, or
// StopOnClose's listener).
package remote

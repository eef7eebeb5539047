package schema

import "time"

// CARotationStatus is where a rotation of the hub's own CA stands (GET
// /v1/ca, `fleet-hub ca status`): which CA signs, which one a rotation
// under way brings in, which are retired, and, device by device, whether
// the device reported trusting the new one (DeviceStatus.TrustedCAs).
type CARotationStatus struct {
	// Active is the pin (CAHash) of the CA that signs the hub's server
	// and client certificates now.
	Active string `json:"active"`
	// ActiveExpires is the active CA's end.
	ActiveExpires time.Time `json:"activeExpires"`
	// Next is the pin of the CA the rotation under way brings in; ""
	// when none is.
	Next string `json:"next,omitempty"`
	// Retired are the pins of the CAs retired: refused from then on.
	Retired []string `json:"retired,omitempty"`
	// Rotating: a rotation is under way (Next is set).
	Rotating bool `json:"rotating"`
	// Pending counts the devices that do not trust the new CA yet (the
	// active one when no rotation is under way), offline ones included.
	Pending int `json:"pending"`
	// Devices are every registered device, by name.
	Devices []CADevice `json:"devices"`
}

// CADevice is one device's place in a CA rotation.
type CADevice struct {
	// Name is the device's name.
	Name string `json:"name"`
	// Online: the device is connected now.
	Online bool `json:"online"`
	// TrustedCAs are the CA pins the device last reported.
	TrustedCAs []string `json:"trustedCAs"`
	// HasNext: the device trusts the new CA of the rotation under way
	// (the active one when none is).
	HasNext bool `json:"hasNext"`
}

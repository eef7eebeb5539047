package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fleetmq/fleet/schema"
)

// Device keys bound at enrollment. A device's X25519 public key, the one
// the hub seals its Secrets to, is kept at DeviceKeyKey (the raw base64
// string). It is recorded once: when the device enrolls with a bootstrap
// token, or else the first time it reports one in its status (a device
// added with `fleet device add`). After that it changes only after
// `fleet device rekey NAME` (RekeyDevice), which marks the device at
// DeviceRekeyKey: the next other key the device reports is then bound,
// once, and the mark removed. A status carrying any other key is refused
// by the status ingest (hub/ingest), so a stolen device token cannot make
// the hub seal the device's Secrets to a key of the thief's. Both keys
// are deleted with the device.

// prefixDeviceRekey marks a device whose next reported key is accepted.
const prefixDeviceRekey = "v1/device-rekey/"

// DeviceRekeyKey marks a device rekeyed by an admin (`fleet device rekey`):
// its value is the time of the rekey (RFC 3339). Deleted with the device
// and when the next key is bound.
func DeviceRekeyKey(device string) string { return prefixDeviceRekey + device }

// DeviceKeyRecord is what the store holds of a device's key.
type DeviceKeyRecord struct {
	// PublicKey is the bound key ("" if none yet).
	PublicKey string
	// Rekey is set after `fleet device rekey`: the next other key the
	// device reports is bound.
	Rekey bool
}

// readDeviceKey reads a device's key record in t.
func readDeviceKey(t *Txn, device string) (DeviceKeyRecord, error) {
	var rec DeviceKeyRecord
	v, err := t.Get(DeviceKeyKey(device))
	switch {
	case err == nil:
		rec.PublicKey = string(v)
	case !errors.Is(err, ErrNotFound):
		return rec, err
	}
	_, err = t.Get(DeviceRekeyKey(device))
	switch {
	case err == nil:
		rec.Rekey = true
	case !errors.Is(err, ErrNotFound):
		return rec, err
	}
	return rec, nil
}

// DeviceKey returns the key record of a device (a zero record if it has
// none).
func (s *Store) DeviceKey(ctx context.Context, device string) (DeviceKeyRecord, error) {
	var rec DeviceKeyRecord
	err := s.View(ctx, func(t *Txn) error {
		var err error
		rec, err = readDeviceKey(t, device)
		return err
	})
	if err != nil {
		return rec, fmt.Errorf("device key of %s: %w", device, err)
	}
	return rec, nil
}

// KeyVerdict is what BindDeviceKey decided about a reported key.
type KeyVerdict int

// Verdicts of BindDeviceKey.
const (
	// KeyKept: the key is the bound one.
	KeyKept KeyVerdict = iota
	// KeyBoundFirst: the device had no key; this one is bound now.
	KeyBoundFirst
	// KeyRebound: the device was rekeyed; this key replaces the old one.
	KeyRebound
	// KeyRefused: another key is bound and the device was not rekeyed.
	KeyRefused
)

// String names the verdict for logs.
func (v KeyVerdict) String() string {
	switch v {
	case KeyKept:
		return "kept"
	case KeyBoundFirst:
		return "bound"
	case KeyRebound:
		return "rebound"
	case KeyRefused:
		return "refused"
	}
	return fmt.Sprintf("KeyVerdict(%d)", int(v))
}

// BindDeviceKey decides about a public key the device uid reported, in
// one transaction: it binds it if the device has no key yet or was
// rekeyed (removing the mark), keeps it if it is the bound one, and
// refuses it otherwise, writing nothing. It returns the verdict and the
// device's key afterwards. It fails with ErrNotFound when the device
// does not exist or is another one of that name (uid differs), and with
// schema.ErrInvalid for a key that is not an X25519 public key.
func (s *Store) BindDeviceKey(ctx context.Context, device, uid, publicKey string) (KeyVerdict, string, error) {
	if _, err := schema.ParseDevicePublicKey(publicKey); err != nil {
		return KeyRefused, "", fmt.Errorf("bind device key of %s: %w: %w", device, schema.ErrInvalid, err)
	}
	verdict, bound := KeyRefused, ""
	_, err := s.Write(ctx, func(t *Txn) error {
		obj, err := t.GetObject(schema.KindDevice, device)
		if err != nil {
			return err
		}
		if uid != "" && obj.GetMetadata().UID != uid {
			return fmt.Errorf("device %s is another device of that name: %w", device, ErrNotFound)
		}
		rec, err := readDeviceKey(t, device)
		if err != nil {
			return err
		}
		verdict, bound = KeyRefused, rec.PublicKey
		switch {
		case rec.PublicKey == publicKey:
			verdict = KeyKept
			return nil
		case rec.PublicKey == "":
			verdict = KeyBoundFirst
		case rec.Rekey:
			verdict = KeyRebound
		default:
			return nil
		}
		bound = publicKey
		if err := t.Set(DeviceKeyKey(device), []byte(publicKey)); err != nil {
			return err
		}
		return t.Delete(DeviceRekeyKey(device))
	})
	if err != nil {
		return KeyRefused, "", fmt.Errorf("bind device key of %s: %w", device, err)
	}
	return verdict, bound, nil
}

// RekeyDevice lets the device's next reported key (other than the bound
// one) replace it, once. It fails with ErrNotFound for an unknown device.
func (s *Store) RekeyDevice(ctx context.Context, device string) (DeviceKeyRecord, error) {
	var rec DeviceKeyRecord
	_, err := s.Write(ctx, func(t *Txn) error {
		if _, err := t.GetObject(schema.KindDevice, device); err != nil {
			return err
		}
		var err error
		if rec, err = readDeviceKey(t, device); err != nil {
			return err
		}
		rec.Rekey = true
		return t.Set(DeviceRekeyKey(device), []byte(s.now().UTC().Format(time.RFC3339)))
	})
	if err != nil {
		return rec, fmt.Errorf("rekey device %s: %w", device, err)
	}
	return rec, nil
}

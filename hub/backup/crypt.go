package backup

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strings"

	"filippo.io/age"
)

// EnvPassphrase is the environment variable that may hold the passphrase
// (the flags --passphrase-file and --recipient win over it).
const EnvPassphrase = "FLEET_BACKUP_PASSPHRASE"

// minPassphrase is the shortest passphrase accepted.
const minPassphrase = 12

// Key says how a backup is encrypted, or decrypted: a passphrase, or age
// X25519 recipients (to encrypt) and identities (to decrypt). Never in
// clear: a Key with nothing in it is an error.
type Key struct {
	// Passphrase encrypts with age's scrypt recipient.
	Passphrase string
	// Recipients are age X25519 public keys ("age1…").
	Recipients []string
	// Identities are age X25519 secret keys ("AGE-SECRET-KEY-1…"), to
	// decrypt a backup made for Recipients.
	Identities []string
	// scryptLogN, if set, replaces age's scrypt work factor (tests).
	scryptLogN int
}

// KeyFlags are the values of the backup flags, as a command has them.
type KeyFlags struct {
	PassphraseFile string
	Recipients     []string
	RecipientFile  string
	IdentityFile   string
}

// Key reads the files the flags name and, with none given, the
// passphrase in EnvPassphrase. what names the command's purpose in
// errors ("backup", "restore").
func (f KeyFlags) Key(what string) (Key, error) {
	var k Key
	if f.PassphraseFile != "" {
		b, err := os.ReadFile(f.PassphraseFile)
		if err != nil {
			return k, fmt.Errorf("--passphrase-file: %w", err)
		}
		k.Passphrase = strings.TrimRight(string(b), "\r\n")
		if k.Passphrase == "" {
			return k, fmt.Errorf("--passphrase-file %s is empty", f.PassphraseFile)
		}
	}
	k.Recipients = append(k.Recipients, f.Recipients...)
	if f.RecipientFile != "" {
		lines, err := keyLines(f.RecipientFile)
		if err != nil {
			return k, fmt.Errorf("--recipient-file: %w", err)
		}
		k.Recipients = append(k.Recipients, lines...)
	}
	if f.IdentityFile != "" {
		lines, err := keyLines(f.IdentityFile)
		if err != nil {
			return k, fmt.Errorf("--identity-file: %w", err)
		}
		k.Identities = lines
	}
	if k.Passphrase == "" && len(k.Recipients) == 0 && len(k.Identities) == 0 {
		k.Passphrase = os.Getenv(EnvPassphrase)
	}
	if k.Passphrase == "" && len(k.Recipients) == 0 && len(k.Identities) == 0 {
		return k, fmt.Errorf("%s: no key: give --passphrase-file FILE, --recipient age1… (or --recipient-file), --identity-file to decrypt, or set %s; backups are never written in clear", what, EnvPassphrase)
	}
	return k, nil
}

// keyLines reads the non-empty, non-comment lines of a key file.
func keyLines(path string) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line != "" && !strings.HasPrefix(line, "#") {
			out = append(out, line)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s holds no key", path)
	}
	return out, nil
}

// recipients are the age recipients that encrypt with k.
func (k Key) recipients() ([]age.Recipient, error) {
	var out []age.Recipient
	if k.Passphrase != "" {
		if len(k.Passphrase) < minPassphrase {
			return nil, fmt.Errorf("passphrase: at least %d characters", minPassphrase)
		}
		if len(k.Recipients) > 0 {
			return nil, errors.New("give a passphrase or recipients, not both (age does not mix them)")
		}
		r, err := age.NewScryptRecipient(k.Passphrase)
		if err != nil {
			return nil, fmt.Errorf("passphrase: %w", err)
		}
		if k.scryptLogN > 0 {
			r.SetWorkFactor(k.scryptLogN)
		}
		out = append(out, r)
	}
	for _, s := range k.Recipients {
		r, err := age.ParseX25519Recipient(s)
		if err != nil {
			return nil, fmt.Errorf("--recipient %q: %w", s, err)
		}
		out = append(out, r)
	}
	if len(out) == 0 {
		return nil, errors.New("no passphrase or recipient: backups are never written in clear")
	}
	return out, nil
}

// identities are the age identities that decrypt with k.
func (k Key) identities() ([]age.Identity, error) {
	var out []age.Identity
	if k.Passphrase != "" {
		id, err := age.NewScryptIdentity(k.Passphrase)
		if err != nil {
			return nil, fmt.Errorf("passphrase: %w", err)
		}
		out = append(out, id)
	}
	for _, s := range k.Identities {
		id, err := age.ParseX25519Identity(s)
		if err != nil {
			return nil, fmt.Errorf("--identity-file: a line is not an age secret key: %w", err)
		}
		out = append(out, id)
	}
	if len(out) == 0 {
		return nil, errors.New("no passphrase or identity to decrypt the backup with")
	}
	return out, nil
}

// CheckKey says whether k can encrypt a backup.
func CheckKey(k Key) error {
	_, err := k.recipients()
	return err
}

package broker

// MosquittoPasswordMatches reports whether hash, a "$7$" hash from a
// Mosquitto password file, is the hash of password. The hub uses it to
// keep its own account's line (hashes are salted, so a fresh one would
// differ and make every rewrite a change).
func MosquittoPasswordMatches(hash, password string) bool {
	ok, err := checkMosquittoHash(hash, password)
	return err == nil && ok
}

// Package adminconf keeps the hub's admin credential and its file,
// <data-dir>/admin.conf (mode 0600, replaced atomically): the hub URL and
// the admin token the fleet CLI uses, and the hub's CA when it has its
// own. The store keeps only the token's hash: the file is the token's only
// plaintext copy, so the hub never makes a new token on its own once one
// exists.
//
// Ensure runs on every start: the first creates the credential (the file
// first, then the hash) and later ones rewrite the file's hub URL and CA,
// keeping its token. Rotate, for a stopped hub, replaces the token.
//
// The file's text is the fleet CLI's config file in its flat form
// (client.AdminConfig). The hub must not import client, so Marshal and
// Read keep the format here; cmd/fleet-hub's tests check them against
// client's Marshal and ReadAdminConfig, the parser the CLI reads config
// files with.
package adminconf

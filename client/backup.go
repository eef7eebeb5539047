package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
)

// BackupRequest is how the hub is to encrypt the backup it streams
// (POST /v1/backup): a passphrase, or age recipients ("age1…").
type BackupRequest struct {
	Passphrase string   `json:"passphrase,omitempty"`
	Recipients []string `json:"recipients,omitempty"`
}

// BackupResult is what the hub says of a backup after the file, in the
// answer's trailers.
type BackupResult struct {
	// Bytes is the size of the file written.
	Bytes int64
	// Revision is the store revision the backup holds.
	Revision uint64
	// Objects counts the stored objects per resource.
	Objects map[string]int
}

// Backup asks the hub for an encrypted backup (admin only) and copies it
// to w. It is a stream: the client's timeout does not bound it. A
// backup the hub could not finish ends in an error (the hub cuts the
// stream; the trailers are then missing), never in a short file
// reported as complete.
func (c *Client) Backup(ctx context.Context, req BackupRequest, w io.Writer) (BackupResult, error) {
	var res BackupResult
	body, err := json.Marshal(req)
	if err != nil {
		return res, fmt.Errorf("backup: %w", err)
	}
	resp, err := c.request(context.WithValue(ctx, streamKey{}, true), http.MethodPost, "/v1/backup", nil, body, "application/json")
	if err != nil {
		return res, err
	}
	defer resp.Body.Close()
	if res.Bytes, err = io.Copy(w, resp.Body); err != nil {
		return res, fmt.Errorf("backup: download cut after %d bytes: %w", res.Bytes, err)
	}
	rev := resp.Trailer.Get("Fleet-Backup-Revision")
	if rev == "" {
		return res, fmt.Errorf("backup: the hub did not finish the backup (%d bytes, no trailer): see its log", res.Bytes)
	}
	if res.Revision, err = strconv.ParseUint(rev, 10, 64); err != nil {
		return res, fmt.Errorf("backup: revision trailer %q: %w", rev, err)
	}
	if o := resp.Trailer.Get("Fleet-Backup-Objects"); o != "" {
		if err := json.Unmarshal([]byte(o), &res.Objects); err != nil {
			res.Objects = nil // informative only: the file is what counts
		}
	}
	return res, nil
}

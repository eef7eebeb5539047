package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/fleetmq/fleet/client"
	"github.com/fleetmq/fleet/schema"
)

// listInChunks lists kind chunkSize items per request (0: everything in
// one), following the hub's pages; on a terminal, a listing of more than
// one page shows how many items came so far on stderr.
func listInChunks(ctx context.Context, cli *cliContext, cl *client.Client, kind client.Kind, selector string, chunkSize int) ([]schema.Object, string, error) {
	opts := client.ListOptions{ChunkSize: chunkSize}
	if chunkSize == 0 {
		opts.ChunkSize = -1 // the client's "no limit"
	}
	if isTerminalWriter(cli.stderr()) {
		opts.OnPage = listProgress(cli.stderr(), kind, time.Now)
	}
	return cl.ListChunked(ctx, kind, selector, opts)
}

// listProgress is the OnPage of a listing that reports to w: "listing
// devices: 12000 so far", rewritten in place at most every 200 ms, and
// ended with the total once the last page is in (so the output that
// follows starts on a line of its own). A listing of one page prints nothing.
func listProgress(w io.Writer, kind client.Kind, now func() time.Time) func(fetched int, more bool) {
	var last time.Time
	shown := false
	return func(fetched int, more bool) {
		if !more {
			if shown {
				fmt.Fprintf(w, "\r\x1b[Klisting %s: %d, done\n", kind, fetched)
			}
			return
		}
		if t := now(); !shown || t.Sub(last) >= 200*time.Millisecond {
			last, shown = t, true
			fmt.Fprintf(w, "\r\x1b[Klisting %s: %d so far…", kind, fetched)
		}
	}
}

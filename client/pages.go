package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strconv"

	"github.com/fleetmq/fleet/schema"
)

// DefaultChunkSize is how many items each request of a list asks for
// (the hub's limit parameter) when ListOptions says nothing: lists of a
// large fleet come in pages that each stay small, as kubectl's do.
const DefaultChunkSize = 500

// ListOptions tune how a list is fetched.
type ListOptions struct {
	// ChunkSize is how many items to ask for per request: 0 takes
	// DefaultChunkSize, a negative one asks for every item at once (no
	// limit, as kubectl's --chunk-size=0).
	ChunkSize int
	// OnPage, if set, is called after each page with the number of items
	// fetched so far and whether more pages follow (for progress).
	OnPage func(fetched int, more bool)
}

func (o ListOptions) limit() int {
	switch {
	case o.ChunkSize == 0:
		return DefaultChunkSize
	case o.ChunkSize < 0:
		return 0
	}
	return o.ChunkSize
}

// ListChunked lists the objects of any kind whose labels match selector,
// a page of opts.ChunkSize at a time, following the hub's continue
// tokens, and returns them with the first page's resourceVersion (a
// watch from it sees every change made while the pages were read). A
// listing the hub can no longer continue fails with an error IsExpired
// reports: list again.
func (c *Client) ListChunked(ctx context.Context, kind Kind, selector string, opts ListOptions) ([]schema.Object, string, error) {
	info, ok := kind.info()
	if !ok {
		return nil, "", kind.valid()
	}
	var objs []schema.Object
	rv, err := c.listPages(ctx, "/v1/"+string(kind), selector, opts, func(raw json.RawMessage) (int, error) {
		// The items decode straight into a []T of the kind's type.
		items := reflect.New(reflect.SliceOf(info.Type))
		if err := json.Unmarshal(raw, items.Interface()); err != nil {
			return 0, err
		}
		s := items.Elem()
		for i := range s.Len() {
			objs = append(objs, s.Index(i).Addr().Interface().(schema.Object))
		}
		return s.Len(), nil
	})
	if err != nil {
		return nil, "", err
	}
	if objs == nil {
		objs = []schema.Object{}
	}
	return objs, rv, nil
}

// listTyped lists path page by page into a []T.
func listTyped[T any](ctx context.Context, c *Client, path, selector string) ([]T, string, error) {
	out := []T{}
	rv, err := c.listPages(ctx, path, selector, ListOptions{}, func(raw json.RawMessage) (int, error) {
		var items []T
		if err := json.Unmarshal(raw, &items); err != nil {
			return 0, err
		}
		out = append(out, items...)
		return len(items), nil
	})
	return out, rv, err
}

// listPages asks for path's pages and hands each page's items, as JSON,
// to add.
func (c *Client) listPages(ctx context.Context, path, selector string, opts ListOptions, add func(json.RawMessage) (int, error)) (string, error) {
	q := selectorQuery(selector)
	if n := opts.limit(); n > 0 {
		q.Set("limit", strconv.Itoa(n))
	}
	var rv string
	fetched := 0
	for page := 1; ; page++ {
		var l struct {
			Metadata schema.ListMeta `json:"metadata"`
			Items    json.RawMessage `json:"items"`
		}
		if err := c.do(ctx, http.MethodGet, path, q, nil, &l); err != nil {
			if page > 1 {
				return "", fmt.Errorf("list %s, page %d: %w", path, page, err)
			}
			return "", err
		}
		if page == 1 {
			rv = l.Metadata.ResourceVersion
		}
		n, err := add(l.Items)
		if err != nil {
			return "", fmt.Errorf("GET %s: decode response: %w", path, err)
		}
		fetched += n
		more := l.Metadata.Continue != ""
		if opts.OnPage != nil {
			opts.OnPage(fetched, more)
		}
		if !more {
			return rv, nil
		}
		if err := ctx.Err(); err != nil {
			return "", err
		}
		q.Set("continue", l.Metadata.Continue)
	}
}

// RegisterDevices registers many devices and issues each a new token in
// one call (POST /v1/devices:batch): a device that does not exist is
// created with the item's labels and description, one that exists is
// kept as it is. The answer lists every device with its new token (shown
// once) in the order of items. At most schema.MaxDeviceBatch items; an
// invalid one is an error IsInvalid reports, naming it (items[i]), and
// nothing is stored.
func (c *Client) RegisterDevices(ctx context.Context, items []schema.DeviceBatchItem) (*schema.DeviceBatchResult, error) {
	var out schema.DeviceBatchResult
	if err := c.do(ctx, http.MethodPost, "/v1/devices:batch", nil, schema.DeviceBatch{Items: items}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

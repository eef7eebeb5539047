package main

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/fleetmq/fleet/client"
	"github.com/fleetmq/fleet/client/printers"
	"github.com/fleetmq/fleet/schema"
)

// deviceFileHelp is the part of fleet device add's help about --from-file.
const deviceFileHelp = `

--from-file FILE (- for stdin) registers every device of a CSV file in a few
calls (POST /v1/devices:batch, 10,000 devices each) instead of one call per
device: 100,000 devices take seconds, not minutes. One device per line:
NAME[,LABELS[,DESCRIPTION]], where LABELS is key=value pairs separated by
";" (or by "," inside a quoted field); a first line "name,labels,description"
and lines starting with # are skipped. Every line is checked before anything
is sent: a bad one is reported with its line number and nothing is stored.
A device that exists already is kept as it is and gets a new token. The
tokens are printed once, as CSV (name,action,token), or with -o json|yaml
as the hub's DeviceBatchResult: redirect them to a file you keep safe.`

// readDeviceFile reads and checks the devices of a --from-file CSV.
func readDeviceFile(cli *cliContext, path string) ([]schema.DeviceBatchItem, error) {
	var r io.Reader
	if path == "-" {
		r = cli.io.in
	} else {
		if !filepath.IsAbs(path) && cli.io.workDir != "" {
			path = filepath.Join(cli.io.workDir, path)
		}
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("--from-file: %w", err)
		}
		defer f.Close()
		r = f
	}
	cr := csv.NewReader(r)
	cr.Comment, cr.FieldsPerRecord, cr.TrimLeadingSpace = '#', -1, true
	var items []schema.DeviceBatchItem
	seen := map[string]int{}
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("--from-file %s: %w", path, err)
		}
		line, _ := cr.FieldPos(0)
		if len(items) == 0 && len(seen) == 0 && strings.EqualFold(strings.TrimSpace(rec[0]), "name") {
			seen[""] = line // the header
			continue
		}
		it, err := deviceRow(rec)
		if err == nil {
			if prev, dup := seen[it.Name]; dup {
				err = fmt.Errorf("device %s is also on line %d", it.Name, prev)
			}
		}
		if err != nil {
			return nil, fmt.Errorf("--from-file %s, line %d: %w", path, line, err)
		}
		seen[it.Name] = line
		items = append(items, it)
	}
	if len(items) == 0 {
		return nil, fmt.Errorf("--from-file %s: no devices in the file", path)
	}
	return items, nil
}

// deviceRow is one CSV line: NAME[,LABELS[,DESCRIPTION]].
func deviceRow(rec []string) (schema.DeviceBatchItem, error) {
	if len(rec) > 3 {
		return schema.DeviceBatchItem{}, fmt.Errorf("%d fields: want NAME[,LABELS[,DESCRIPTION]] (quote labels that hold commas)", len(rec))
	}
	it := schema.DeviceBatchItem{Name: strings.TrimSpace(rec[0])}
	if len(rec) > 1 && strings.TrimSpace(rec[1]) != "" {
		var args []string
		for _, p := range strings.FieldsFunc(rec[1], func(r rune) bool { return r == ';' || r == ',' }) {
			args = append(args, strings.TrimSpace(p))
		}
		edit, err := client.ParseLabelEdit(args)
		if err != nil {
			return it, err
		}
		if len(edit.Remove) > 0 {
			return it, fmt.Errorf("label %s-: a new device has no labels to remove", edit.Remove[0])
		}
		it.Labels = edit.Set
	}
	if len(rec) > 2 {
		it.Description = strings.TrimSpace(rec[2])
	}
	dev := &schema.Device{
		TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: schema.KindDevice},
		Metadata: schema.ObjectMeta{Name: it.Name, Labels: it.Labels},
		Spec:     schema.DeviceSpec{Description: it.Description},
	}
	return it, schema.ValidateDevice(dev)
}

// runDeviceAddFile registers the devices of --from-file, schema.MaxDeviceBatch
// per call, and prints their tokens.
func runDeviceAddFile(ctx context.Context, cli *cliContext, path string, format printers.Format) error {
	items, err := readDeviceFile(cli, path)
	if err != nil {
		return err
	}
	cl, err := cli.Client()
	if err != nil {
		return err
	}
	all := schema.DeviceBatchResult{Items: make([]schema.DeviceBatchItemResult, 0, len(items))}
	show := len(items) > schema.MaxDeviceBatch && isTerminalWriter(cli.stderr())
	for start := 0; start < len(items); start += schema.MaxDeviceBatch {
		end := min(start+schema.MaxDeviceBatch, len(items))
		res, err := cl.RegisterDevices(ctx, items[start:end])
		if err != nil {
			if start > 0 {
				// The tokens of the calls before are lost unless printed.
				_ = printDeviceTokens(cli, all, format)
				return fmt.Errorf("devices %d to %d of %d (from device %s): %w; the ones before are registered and printed above: run the command again for the rest (or all: existing devices are kept, with new tokens)", start+1, end, len(items), items[start].Name, err)
			}
			return err
		}
		all.Items = append(all.Items, res.Items...)
		if show {
			fmt.Fprintf(cli.stderr(), "\r\x1b[Kregistered %d of %d devices…", len(all.Items), len(items))
		}
	}
	if show {
		fmt.Fprintln(cli.stderr())
	}
	created := 0
	for _, it := range all.Items {
		if it.Action == schema.ActionCreated {
			created++
		}
	}
	fmt.Fprintf(cli.stderr(), "%d devices registered (%d created, %d existed and got a new token); the tokens are shown once: keep them safe\n",
		len(all.Items), created, len(all.Items)-created)
	return printDeviceTokens(cli, all, format)
}

// printDeviceTokens prints a batch's tokens as CSV, or in format.
func printDeviceTokens(cli *cliContext, res schema.DeviceBatchResult, format printers.Format) error {
	if format != "" {
		return printers.WriteSecret(cli.stdout(), format, res)
	}
	w := csv.NewWriter(cli.stdout())
	_ = w.Write([]string{"name", "action", "token"})
	for _, it := range res.Items {
		_ = w.Write([]string{it.Name, it.Action, it.Token})
	}
	w.Flush()
	return w.Error()
}

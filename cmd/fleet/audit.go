package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/fleetmq/fleet/client"
	"github.com/fleetmq/fleet/client/printers"
	"github.com/fleetmq/fleet/schema"
)

type auditOptions struct {
	since     string
	actor     string
	limit     int
	output    string
	noHeaders bool
}

func newAuditCmd(cli *cliContext) *cobra.Command {
	var o auditOptions
	cmd := &cobra.Command{
		Use:   "audit [--since 1h] [--actor NAME] [--limit N] [-o table|wide|json|yaml]",
		Short: "Show the hub's audit trail: who did what, when, from where",
		Long: `Show the hub's audit trail, oldest first: every write (apply, create, update,
delete, rollback), token and credential change, exec and log request, the
first use of each token from each address in a minute, and refused or
failed authentications. Admin only.

Columns: AGE, ACTOR (a credential's name, or anonymous), SOURCE (the
client's address), ACTION, OBJECT, RESULT (ok or the HTTP code), COUNT;
-o wide adds TIME, ROLE and DETAIL. -o json and -o yaml print an
AuditList, for a SIEM: --since 15m -o json every quarter of an hour.

What anyone can cause in bulk is aggregated, so that no one can push other
entries out: refused requests (every 4xx), failed logins and token uses
are recorded per actor, source, action and result as the first event at
once (COUNT 1), then one entry a minute counting the rest (COUNT n, from
TIME to the entry's "until"; the counts so far are written before the
trail is read, so what this command shows is complete). Successful writes
are one entry each.

The hub keeps entries for --audit-retention (90 days) within
--audit-max-bytes (100 MiB), oldest out first; it also logs each one (msg
"audit"). Entries never hold tokens or Secret values. Each entry carries
the hash of the one before: "fleet audit verify" checks the chain.`,
		Example: `  # What happened in the last hour
  fleet audit --since 1h

  # Everything one credential did
  fleet audit --actor grafana -o wide

  # Failed logins
  fleet audit --actor anonymous

  # Export the last day for a SIEM
  fleet audit --since 24h --limit 0 -o json

  # Check that no entry was edited or removed
  fleet audit verify`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runAudit(cmd.Context(), cli, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.since, "since", "", "only entries newer than this: a duration (1h, 30m) or an RFC 3339 time")
	f.StringVar(&o.actor, "actor", "", "only this actor's entries (a credential's name, or anonymous)")
	f.IntVar(&o.limit, "limit", schema.DefaultAuditLimit, "at most this many entries, the newest (0: all the hub keeps)")
	addOutputFlag(cmd, &o.output, "", "output format: table (default), wide, json or yaml")
	f.BoolVar(&o.noHeaders, "no-headers", false, "leave out the header line of the table")
	cmd.AddCommand(newAuditVerifyCmd(cli))
	return cmd
}

func runAudit(ctx context.Context, cli *cliContext, o auditOptions) error {
	if o.limit < 0 {
		return fmt.Errorf("--limit %d: want 0 (all) or more", o.limit)
	}
	if o.since != "" {
		if _, err := time.ParseDuration(o.since); err != nil {
			if _, err := time.Parse(time.RFC3339Nano, o.since); err != nil {
				return fmt.Errorf("--since %q: want a duration (1h) or an RFC 3339 time", o.since)
			}
		}
	}
	p, err := cli.printer(o.output, o.noHeaders)
	if err != nil {
		return err
	}
	switch p.Format {
	case printers.Table, printers.Wide, printers.JSON, printers.YAML:
	default:
		return errors.New("audit entries print as -o table, wide, json or yaml")
	}
	cl, err := cli.Client()
	if err != nil {
		return err
	}
	limit := o.limit
	if limit == 0 {
		limit = -1 // all
	}
	entries, err := cl.Audit(ctx, client.AuditOptions{Since: o.since, Actor: o.actor, Limit: limit})
	if err != nil {
		return err
	}
	if len(entries) == 0 && p.Format != printers.JSON && p.Format != printers.YAML {
		fmt.Fprintln(cli.stderr(), "No audit entries found.")
		return nil
	}
	return printAudit(p, entries, time.Now())
}

// printAudit prints audit entries as a table or an AuditList.
func printAudit(p *printers.Printer, entries []schema.AuditEntry, now time.Time) error {
	switch p.Format {
	case printers.JSON, printers.YAML:
		l := schema.AuditList{TypeMeta: schema.TypeMeta{APIVersion: schema.APIVersion, Kind: "AuditList"}, Items: entries}
		if p.Format == printers.JSON {
			return printers.WriteJSON(p.Out, l)
		}
		return printers.WriteYAML(p.Out, l)
	}
	wide := p.Format == printers.Wide
	rows := make([][]string, len(entries))
	for i, e := range entries {
		obj, src, count := dash(e.Object), dash(e.Source), "-"
		if e.Count > 0 {
			count = strconv.Itoa(e.Count)
		}
		if wide {
			rows[i] = []string{printers.Age(&e.Time, now), e.Time.UTC().Format(time.RFC3339), e.Actor, dash(e.Role), src, e.Action, obj, e.Result, count, dash(strings.Join(strings.Fields(e.Detail), " "))}
		} else {
			rows[i] = []string{printers.Age(&e.Time, now), e.Actor, src, e.Action, obj, e.Result, count}
		}
	}
	var h []string
	switch {
	case p.NoHeaders:
	case wide:
		h = []string{"AGE", "TIME", "ACTOR", "ROLE", "SOURCE", "ACTION", "OBJECT", "RESULT", "COUNT", "DETAIL"}
	default:
		h = []string{"AGE", "ACTOR", "SOURCE", "ACTION", "OBJECT", "RESULT", "COUNT"}
	}
	return printers.WriteTable(p.Out, h, rows)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func newAuditVerifyCmd(cli *cliContext) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "verify [-o json|yaml]",
		Short: "Check the audit trail's hash chain: no entry edited or removed",
		Long: `Ask the hub to check its audit trail end to end. Each entry carries the
SHA-256 of the one before (over that hash and its own JSON); the oldest kept
entry chains to the anchor, the hash of the last entry pruned. An entry
edited, removed or moved in the store breaks the chain: the command names
the first entry that does and exits non-zero.

It prints the head (the newest entry's hash): keep it elsewhere (a SIEM,
a ticket) to detect a later rewrite of the whole tail. The check is itself
recorded in the trail. Admin only.`,
		Example: `  # Exit 0 if the chain holds
  fleet audit verify

  # The full answer, with the head hash and the anchor
  fleet audit verify -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runAuditVerify(cmd.Context(), cli, output)
		},
	}
	addOutputFlag(cmd, &output, "", "output format: text (default), json or yaml")
	return cmd
}

func runAuditVerify(ctx context.Context, cli *cliContext, output string) error {
	p, err := cli.printer(output, false)
	if err != nil {
		return err
	}
	cl, err := cli.Client()
	if err != nil {
		return err
	}
	v, err := cl.VerifyAudit(ctx)
	if err != nil {
		return err
	}
	switch p.Format {
	case printers.JSON:
		err = printers.WriteJSON(p.Out, v)
	case printers.YAML:
		err = printers.WriteYAML(p.Out, v)
	default:
		if v.OK {
			fmt.Fprintf(p.Out, "audit trail intact: %d entries (%d to %d), anchored at entry %d\nhead %s\n",
				v.Entries, v.FirstSeq, v.LastSeq, v.Anchor.Seq, dash(v.Head))
		}
		if v.Unchained > 0 {
			fmt.Fprintf(p.Out, "%d older entries precede the chain (written before it existed): not checked\n", v.Unchained)
		}
	}
	if err != nil {
		return err
	}
	if !v.OK {
		return fmt.Errorf("audit trail broken at entry %d: %s (%d entries before it verified)", v.Broken.Seq, v.Broken.Reason, v.Entries)
	}
	return nil
}

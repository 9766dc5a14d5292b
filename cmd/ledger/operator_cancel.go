package main

import (
	"context"
	"flag"
	"fmt"
	"net/url"

	"github.com/peterbourgon/ff/v3/ffcli"
)

// cancelBody is the body of both cancel endpoints.
type cancelBody struct {
	Reason string `json:"reason,omitempty"`
	Actor  string `json:"actor,omitempty"`
}

// cancelFlags are the flags both cancel commands take.
func cancelFlags(fs *flag.FlagSet) (reason, actor *string) {
	reason = fs.String("reason", "", "why, recorded in the history (at most 500 characters)")
	actor = fs.String("actor", "", "who asks, recorded in the history (default: the key's tenant, as tenant:NAME)")
	return reason, actor
}

// deliveryCancelCommand is `ledger deliveries cancel ID`.
func (o *operatorCommands) deliveryCancelCommand() *ffcli.Command {
	var s apiSettings
	fs := flag.NewFlagSet("ledger deliveries cancel", flag.ContinueOnError)
	s.flags(fs)
	reason, actor := cancelFlags(fs)
	return o.command(&ffcli.Command{
		Name:       "cancel",
		ShortUsage: "ledger deliveries cancel ID [--reason TEXT] [--actor A] [--json]",
		ShortHelp:  "cancel a delivery no attempt has started for (POST /v1/deliveries/{id}/cancel)",
		LongHelp: "An accepted, scheduled or queued delivery whose first attempt has not started is cancelled\n" +
			"and never sent. Repeating it answers the same. Once an attempt has started it is refused\n" +
			"(409 naming the state and the attempt, exit status 1).",
		FlagSet: fs,
		Exec: func(ctx context.Context, args []string) error {
			const command = "ledger deliveries cancel"
			ids, err := operands(command, fs, args)
			if err != nil {
				return err
			}
			if len(ids) != 1 {
				return usagef(command, "name one delivery ID, got %d operands", len(ids))
			}
			c, err := s.client(command)
			if err != nil {
				return err
			}
			a, err := c.post(ctx, "/v1/deliveries/"+url.PathEscape(ids[0])+"/cancel", nil, cancelBody{*reason, *actor})
			if err != nil {
				return err
			}
			return o.writeDecision(a, s.json, "cancelled")
		},
	})
}

// notificationsCommand is `ledger notifications cancel ID`.
func (o *operatorCommands) notificationsCommand() *ffcli.Command {
	var s apiSettings
	fs := flag.NewFlagSet("ledger notifications cancel", flag.ContinueOnError)
	s.flags(fs)
	reason, actor := cancelFlags(fs)
	cancel := o.command(&ffcli.Command{
		Name:       "cancel",
		ShortUsage: "ledger notifications cancel ID [--reason TEXT] [--actor A] [--json]",
		ShortHelp:  "cancel each delivery of a notification (POST /v1/notifications/{id}/cancel)",
		LongHelp: "Cancels every delivery of the notification that no attempt has started for, and prints one\n" +
			"line per delivery: its id, its state, its latest attempt, and whether it was cancelled.",
		FlagSet: fs,
		Exec: func(ctx context.Context, args []string) error {
			const command = "ledger notifications cancel"
			ids, err := operands(command, fs, args)
			if err != nil {
				return err
			}
			if len(ids) != 1 {
				return usagef(command, "name one notification ID, got %d operands", len(ids))
			}
			c, err := s.client(command)
			if err != nil {
				return err
			}
			a, err := c.post(ctx, "/v1/notifications/"+url.PathEscape(ids[0])+"/cancel", nil, cancelBody{*reason, *actor})
			if err != nil {
				return err
			}
			if s.json {
				return o.writeDocument(a)
			}
			var doc struct {
				Deliveries []struct {
					ID        string `json:"id"`
					State     string `json:"state"`
					Attempt   int    `json:"attempt"`
					Cancelled bool   `json:"cancelled"`
				} `json:"deliveries"`
			}
			if err := a.decode(&doc); err != nil {
				return err
			}
			for _, d := range doc.Deliveries {
				verdict := "cancelled"
				if !d.Cancelled {
					verdict = "not cancelled: an attempt has started"
				}
				fmt.Fprintf(o.stdout, "%s %s attempt %d %s\n", d.ID, d.State, d.Attempt, verdict)
			}
			return nil
		},
	})
	return o.group("notifications", "cancel a notification's deliveries through the HTTP API", cancel)
}

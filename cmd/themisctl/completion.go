package main

import (
	"context"
	"strings"
	"time"
	"unicode"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/client"
	"github.com/themisfs/themis/guest"
)

// completionWait bounds a completion's call to the daemon: a shell waits
// on it.
const completionWait = 2 * time.Second

// completionMax is the most IDs a completion offers.
const completionMax = 200

// addCompletions gives root's commands their shell completions (themisctl
// completion bash|zsh|fish|powershell): lane specs for every --fs, finding
// IDs for the commands that take a FINDING, session IDs for those that
// take a SESSION. IDs come from a daemon that answers (--addr or the
// local socket); a completion never starts one.
func addCompletions(g *globals, root *cobra.Command) {
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Flags().Lookup("fs") != nil {
			if err := c.RegisterFlagCompletionFunc("fs", completeLanes); err != nil {
				panic("themisctl: " + c.CommandPath() + ": " + err.Error()) // registered twice: a bug here
			}
		}
		word, _, _ := strings.Cut(c.Use, " ")
		rest := strings.TrimPrefix(c.Use, word)
		switch {
		case c.ValidArgsFunction != nil:
			// the command completes its arguments itself
		case strings.HasPrefix(strings.TrimSpace(rest), "FINDING"):
			c.ValidArgsFunction = g.completeIDs(listFindingIDs, false)
		case strings.HasPrefix(strings.TrimSpace(rest), "SESSION..."):
			c.ValidArgsFunction = g.completeIDs(listSessionIDs, true)
		case strings.HasPrefix(strings.TrimSpace(rest), "SESSION"):
			c.ValidArgsFunction = g.completeIDs(listSessionIDs, false)
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// completeLanes completes the last of a comma-separated list of lane specs
// with the filesystems a lane may name.
func completeLanes(_ *cobra.Command, _ []string, toComplete string) ([]string, cobra.ShellCompDirective) {
	done, last := "", toComplete
	if i := strings.LastIndexByte(toComplete, ','); i >= 0 {
		done, last = toComplete[:i+1], toComplete[i+1:]
	}
	var out []string
	for _, fs := range guest.SupportedFS() {
		if strings.HasPrefix(fs, last) {
			out = append(out, done+fs)
		}
	}
	return out, cobra.ShellCompDirectiveNoSpace | cobra.ShellCompDirectiveNoFileComp
}

// idLister lists IDs, each with a description, from a daemon.
type idLister func(ctx context.Context, c *client.Client) ([]string, error)

// completeIDs completes a command's first argument (every argument when
// all) with list's IDs.
func (g *globals) completeIDs(list idLister, all bool) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		if len(args) > 0 && !all {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		if g.log == nil {
			g.log = zap.NewNop() // completions run no PersistentPreRunE
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), completionWait)
		defer cancel()
		c, err := dialExisting(ctx, g)
		if err != nil || c == nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		defer func() {
			if err := c.Close(); err != nil {
				cobra.CompDebugln("close: "+err.Error(), false)
			}
		}()
		ids, err := list(ctx, c)
		if err != nil {
			cobra.CompDebugln("list: "+err.Error(), false)
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return withPrefix(ids, toComplete), cobra.ShellCompDirectiveNoFileComp
	}
}

// withPrefix keeps the completions ("ID\tdescription") whose ID starts
// with prefix.
func withPrefix(ids []string, prefix string) []string {
	var out []string
	for _, id := range ids {
		if strings.HasPrefix(id, prefix) {
			out = append(out, id)
		}
	}
	return out
}

// listFindingIDs are the daemon's newest findings: ID, then kind and
// signature as the description.
func listFindingIDs(ctx context.Context, c *client.Client) ([]string, error) {
	resp, err := c.ListFindings(ctx, &themisv1.ListFindingsRequest{PageSize: completionMax})
	if err != nil {
		return nil, err
	}
	return findingCompletions(resp.GetFindings()), nil
}

// findingCompletions are "ID\tdescription" lines of findings: the
// signature, after the kind where the signature does not start with it.
func findingCompletions(fs []*themisv1.Finding) []string {
	out := make([]string, 0, len(fs))
	for _, f := range fs {
		desc := f.GetSignature()
		if !strings.HasPrefix(desc, f.GetKind()) {
			desc = f.GetKind() + " " + desc
		}
		out = append(out, oneLine(f.GetId())+"\t"+oneLine(desc))
	}
	return out
}

// listSessionIDs are the daemon's sessions: ID, then state and lanes.
func listSessionIDs(ctx context.Context, c *client.Client) ([]string, error) {
	resp, err := c.ListSessions(ctx, &themisv1.ListSessionsRequest{PageSize: completionMax})
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(resp.GetSessions()))
	for _, s := range resp.GetSessions() {
		var lanes []string
		for _, l := range s.GetLanes() {
			lanes = append(lanes, l.GetSpec())
		}
		out = append(out, oneLine(s.GetId())+"\t"+oneLine(strings.TrimPrefix(s.GetState().String(), "STATE_")+" "+strings.Join(lanes, ",")))
	}
	return out, nil
}

// oneLine is s with control characters as spaces (a completion's
// description is one line after one tab, and what a guest named must not
// reach the terminal as an escape), cut to 80 bytes of valid UTF-8.
func oneLine(s string) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, s)
	if len(s) > 80 {
		s = strings.ToValidUTF8(s[:80], "")
	}
	return s
}

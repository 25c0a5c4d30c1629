package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/themisfs/themis/api"
	themisv1 "github.com/themisfs/themis/api/proto/themis/v1"
	"github.com/themisfs/themis/embedded"
)

// newEvents is `themisctl events`.
func newEvents(g *globals) *cobra.Command {
	var after int64
	var limit int
	cmd := &cobra.Command{
		Use: "events SESSION", Short: "Show a session's ledger events", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.withConn(cmd, func(ctx context.Context, c *conn) error {
				resp, err := listEvents(ctx, c, args[0], after, limit)
				if err != nil {
					return err
				}
				return g.printMessage(resp, func(w *tabwriter.Writer) {
					for _, e := range resp.GetEvents() {
						fmt.Fprintf(w, "%d\t%s\t%s\t%s\n", e.GetSeq(), e.GetTime().AsTime().Format(time.RFC3339), e.GetKind(), e.GetDetail())
					}
				})
			})
		},
	}
	cmd.Flags().Int64Var(&after, "after", 0, "only events after this sequence number")
	cmd.Flags().IntVar(&limit, "limit", 100, "at most this many events (0: all), fetched in pages")
	return cmd
}

// listEvents follows ListEvents' pages (by after_seq) until limit events
// (0: all) or the end.
func listEvents(ctx context.Context, c *conn, id string, after int64, limit int) (*themisv1.ListEventsResponse, error) {
	if limit < 0 {
		return nil, fmt.Errorf("--limit: must not be negative, got %d", limit)
	}
	resp := &themisv1.ListEventsResponse{}
	for limit == 0 || len(resp.Events) < limit {
		want := api.MaxEventLimit
		if limit > 0 {
			want = min(want, limit-len(resp.Events))
		}
		page, err := c.ListEvents(ctx, &themisv1.ListEventsRequest{SessionId: id, AfterSeq: after, Limit: int32(want)})
		if err != nil {
			return nil, err
		}
		evs := page.GetEvents()
		resp.Events = append(resp.Events, evs...)
		if len(evs) < want {
			break
		}
		after = evs[len(evs)-1].GetSeq()
	}
	return resp, nil
}

// newDaemon is `themisctl daemon`: the daemon in the foreground.
func newDaemon(g *globals) *cobra.Command {
	var o embedded.ServeOptions
	cmd := &cobra.Command{
		Use: "daemon", Short: "Run the daemon in the foreground (as themisd does)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			o.CacheDir = g.cacheDir
			o.Listening = func(addr string) { fmt.Fprintf(os.Stderr, "themisctl daemon: listening on %s\n", addr) }
			return embedded.Serve(ctx, o, g.log)
		},
	}
	cmd.Flags().StringVar(&o.ConfigFile, "config", "", "TOML config file (as themisd's)")
	cmd.Flags().StringVar(&o.Listen, "listen", "", "unix:///path (default: the standard socket) or tcp://host:port (needs TLS)")
	cmd.Flags().StringVar(&o.StateDir, "state-dir", "", "ledger directory")
	return cmd
}

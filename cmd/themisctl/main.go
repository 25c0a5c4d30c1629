// Command themisctl is the Themis CLI: host checks (doctor), the guest image
// builder, and the daemon's API (sessions, fork, restore, apply, fingerprint,
// ...). With no daemon to talk to, it runs one in-process.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

type globals struct {
	json     bool
	verbose  bool
	cacheDir string
	log      *zap.Logger
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRoot().ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "themisctl:", err)
		os.Exit(1)
	}
}

func newRoot() *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:           "themisctl",
		Short:         "Themis: a filesystem model checker that owns the machine",
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			level := zapcore.WarnLevel
			if g.verbose {
				level = zapcore.DebugLevel
			}
			cfg := zap.NewDevelopmentConfig()
			cfg.Level = zap.NewAtomicLevelAt(level)
			cfg.OutputPaths = []string{"stderr"}
			log, err := cfg.Build()
			if err != nil {
				return fmt.Errorf("logger: %w", err)
			}
			g.log = log
			return nil
		},
	}
	root.PersistentFlags().BoolVar(&g.json, "json", false, "print machine-readable JSON on stdout")
	root.PersistentFlags().BoolVarP(&g.verbose, "verbose", "v", false, "debug logging on stderr")
	root.PersistentFlags().StringVar(&g.cacheDir, "cache-dir", "", "guest image cache (default: $THEMIS_CACHE_DIR or the user cache dir)")
	root.AddCommand(newDoctor(g), newGuest(g))
	addAPI(root, g)
	return root
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("encode json: %w", err)
	}
	return nil
}

// progress prints a step line on stderr (never on stdout, which may be JSON).
func progress(step string) {
	fmt.Fprintf(os.Stderr, "==> %s\n", step)
}

package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// globals are the root's flags and what every command shares: the logger
// (built before any command runs) and how to reach a daemon.
type globals struct {
	json     bool
	verbose  bool
	cacheDir string
	log      *zap.Logger
	conn     connFlags
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRoot().ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "themisctl:", err)
		os.Exit(exitCode(err))
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
	g.conn.register(root)
	root.AddCommand(newDoctor(g), newGuest(g))
	root.AddCommand(newExplore(g), newCheck(g), newFindings(g), newReplay(g), newBisect(g))
	root.AddCommand(newSweep(g), newBench(g))
	root.AddCommand(newProfile(g), newCorrupt(g), newCrash(g))
	root.AddCommand(newDiff(g), newReport(g))
	root.AddCommand(newSession(g), newFork(g), newRestore(g), newCheckpoints(g), newApply(g), newFingerprint(g),
		newStat(g), newRestoreFile(g), newEvents(g), newDaemon(g))
	addCompletions(g, root)
	return root
}

// progress prints a step line on stderr (never on stdout, which may be JSON).
func progress(step string) {
	fmt.Fprintf(os.Stderr, "==> %s\n", step)
}

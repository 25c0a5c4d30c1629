// Command themisd is the Themis daemon: it serves the themis.v1 API (see
// docs/api.md) on a unix socket, or on TCP with TLS, and runs the guests.
// This file is wiring only; package server holds the daemon.
//
//	themisd --config /etc/themis/themisd.toml
//	themisd --listen unix:///tmp/themis.sock --state-dir /tmp/themis-state -v
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/themisfs/themis/server"
)

// defaultDrain bounds how long in-flight calls may finish after a signal
// (--drain); then they are cancelled (server.Daemon.Shutdown).
const defaultDrain = 30 * time.Second

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "themisd:", err)
		os.Exit(1)
	}
}

func run() error {
	var (
		configPath    = flag.String("config", "", "TOML config file (see deploy/themisd.example.toml)")
		listen        = flag.String("listen", "", "listen address, unix:///path or tcp://host:port (overrides the config)")
		stateDir      = flag.String("state-dir", "", "state directory holding the ledger (overrides the config)")
		metricsListen = flag.String("metrics-listen", "", "Prometheus endpoint host:port (overrides the config)")
		verbose       = flag.Bool("v", false, "debug logging")
		drain         = flag.Duration("drain", defaultDrain, "on SIGTERM, how long in-flight calls and runs may finish before they are cancelled")
	)
	flag.Parse()
	if flag.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %q", flag.Args())
	}
	if *drain <= 0 {
		return fmt.Errorf("--drain %v: must be positive", *drain)
	}

	cfg := server.Config{}
	if *configPath != "" {
		var err error
		if cfg, err = server.LoadConfig(*configPath); err != nil {
			return err
		}
	}
	if *listen != "" {
		cfg.Listen = *listen
	}
	if *stateDir != "" {
		cfg.StateDir = *stateDir
	}
	if *metricsListen != "" {
		cfg.MetricsListen = *metricsListen
	}

	zc := zap.NewProductionConfig()
	if *verbose {
		zc.Level = zap.NewAtomicLevelAt(zapcore.DebugLevel)
	}
	log, err := zc.Build()
	if err != nil {
		return fmt.Errorf("logger: %w", err)
	}
	defer func() { _ = log.Sync() }() // stderr sync fails on some terminals; nothing to do

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	d, err := server.StartDaemon(ctx, cfg, log)
	if err != nil {
		return err
	}
	var serveErr error
	select {
	case <-ctx.Done():
		log.Info("signal received; shutting down")
	case <-d.Done():
		serveErr = d.Err()
	}
	stop() // a second signal kills the process the default way

	sctx, cancel := context.WithTimeout(context.Background(), *drain)
	defer cancel()
	return errors.Join(serveErr, d.Shutdown(sctx))
}

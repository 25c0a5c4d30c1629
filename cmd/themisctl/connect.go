package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	"github.com/themisfs/themis/client"
	"github.com/themisfs/themis/embedded"
)

// conn is a connection to a daemon: a remote one, the local one on the
// default socket, or one started in this process (the embedded default).
type conn struct {
	*client.Client
	embedded *embedded.Daemon
}

type connFlags struct {
	addr, tokenFile, ca, cert, key, serverName string
	embedded                                   bool
}

func (f *connFlags) register(cmd *cobra.Command) {
	pf := cmd.PersistentFlags()
	pf.StringVar(&f.addr, "addr", os.Getenv("THEMIS_ADDR"), "daemon address: unix:///path or host:port (TLS); default: the local daemon's socket if one answers, else a daemon in this process")
	pf.StringVar(&f.tokenFile, "token-file", "", "file holding a bearer token for the daemon")
	pf.StringVar(&f.ca, "ca", "", "PEM CA bundle that verifies the daemon's certificate")
	pf.StringVar(&f.cert, "cert", "", "PEM client certificate (mTLS)")
	pf.StringVar(&f.key, "key", "", "PEM client key (mTLS)")
	pf.StringVar(&f.serverName, "server-name", "", "name to verify in the daemon's certificate")
	pf.BoolVar(&f.embedded, "embedded", false, "always run a daemon in this process (sessions end when the command does)")
}

// withConn runs fn with a connection, closing it (and an embedded daemon)
// after; fn's error comes first.
func (g *globals) withConn(cmd *cobra.Command, fn func(ctx context.Context, c *conn) error) error {
	ctx := cmd.Context()
	c, err := connect(ctx, g)
	if err != nil {
		return err
	}
	ferr := fn(ctx, c)
	if cerr := c.Close(); cerr != nil && ferr == nil {
		ferr = cerr
	}
	return ferr
}

// connect reaches the daemon the flags name, the local one, or starts one
// in this process.
func connect(ctx context.Context, g *globals) (*conn, error) {
	c, err := dialExisting(ctx, g)
	if err != nil {
		return nil, err
	}
	if c != nil {
		return &conn{Client: c}, nil
	}
	opts, err := g.conn.options()
	if err != nil {
		return nil, err
	}
	d, err := embedded.Start(ctx, g.cacheDir, "", g.log)
	if err != nil {
		return nil, err
	}
	c, err = client.Dial(ctx, d.Addr(), opts)
	if err != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return nil, errors.Join(fmt.Errorf("embedded daemon: %w", err), d.Shutdown(sctx))
	}
	return &conn{Client: c, embedded: d}, nil
}

// options are the client options the flags give.
func (f *connFlags) options() (client.Options, error) {
	opts := client.Options{CAFile: f.ca, CertFile: f.cert, KeyFile: f.key, ServerName: f.serverName}
	if f.tokenFile != "" {
		b, err := os.ReadFile(f.tokenFile)
		if err != nil {
			return opts, fmt.Errorf("--token-file: %w", err)
		}
		opts.Token = string(bytes.TrimSpace(b))
	}
	return opts, nil
}

// dialExisting reaches the daemon --addr names, else the local one on the
// default socket when it answers within 2 s; nil (and no error) when the
// flags ask for an embedded daemon or none answers.
func dialExisting(ctx context.Context, g *globals) (*client.Client, error) {
	f := &g.conn
	if f.embedded {
		return nil, nil
	}
	opts, err := f.options()
	if err != nil {
		return nil, err
	}
	if f.addr != "" {
		c, err := client.Dial(ctx, f.addr, opts)
		if err != nil {
			return nil, fmt.Errorf("connect %s: %w", f.addr, err)
		}
		return c, nil
	}
	if _, err := os.Stat(client.DefaultSocket()); err != nil {
		return nil, nil
	}
	dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	c, err := client.Dial(dctx, client.DefaultAddr(), opts)
	if err != nil {
		g.log.Debug("local daemon did not answer; starting one in-process")
		return nil, nil
	}
	return c, nil
}

// Close ends the connection and, for an embedded daemon, stops it (and every guest it ran).
func (c *conn) Close() error {
	errs := []error{c.Client.Close()}
	if c.embedded != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		errs = append(errs, c.embedded.Shutdown(ctx))
	}
	return errors.Join(errs...)
}

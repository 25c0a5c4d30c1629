package explore

import (
	"context"
	"errors"
	"fmt"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
)

// reproduceKernel is reproduce for a "kernel" finding: trace runs from
// the root of a fresh System (freshSystem) and reproduces f when the
// guest dies with a kernel report of f's signature
// (kreport.Report.Signature: the report's kind and where the CPU was,
// the RIP's function, or for a report without registers its first line
// with the numbers masked). The first line is not compared as it is: it
// holds addresses, CPU and PID numbers that differ from one crash of the
// same fault to the next. A death of another signature, or without a
// report, does not reproduce f. A System the try killed is replaced at
// once, so the next try does not inherit its death. The finding
// returned ends at the op that crashed and carries the try's report.
// The empty trace is not tried: every worker checkpointed and
// fingerprinted the root without its guest dying.
func (s *search) reproduceKernel(ctx context.Context, w *worker, f *Finding, trace []*agentv1.Request) (*Finding, error) {
	if len(trace) == 0 {
		return nil, nil
	}
	if err := w.freshSystem(ctx); err != nil {
		return nil, err
	}
	out, err := s.replay(ctx, w, trace)
	switch {
	case err == nil:
		return nil, nil
	case !errors.Is(err, ErrGuestDied) || ctx.Err() != nil:
		return nil, err
	}
	if rerr := w.replaceSystem(ctx); rerr != nil {
		return nil, errors.Join(err, rerr)
	}
	var kc *KernelCrash
	if !errors.As(err, &kc) || out == nil || kc.Report.Signature() != f.Kernel.Signature() {
		return nil, nil // another death, or one in the root's restore
	}
	// The op that crashed is the one after the last result; a crash in
	// the fingerprint after the last op is the last op's.
	n := min(len(out.Results)+1, len(trace))
	r := kc.Report
	g := *f
	g.Trace, g.Kernel, g.Detail = trace[:n:n], &r, kernelDetail(&r, trace[:n])
	return &g, nil
}

// freshSystem makes sure no op ran on the worker's System since it
// booted: with Workers.Fresh a used System is replaced by a fresh one;
// without it the try runs on the System restored to its root
// checkpoint (Replay's first step), which Workers.Fresh's doc says must
// then reset the whole machine.
func (w *worker) freshSystem(ctx context.Context) error {
	if w.fresh || w.s.fresh == nil {
		return nil
	}
	sys, err := w.s.fresh(ctx, w.i, w.sys)
	if err != nil {
		return fmt.Errorf("explore: a fresh System for worker %d: %w", w.i, err)
	}
	w.sys = sys
	if err := w.init(ctx); err != nil {
		return err
	}
	w.fresh = true
	return nil
}

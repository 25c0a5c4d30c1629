package session

import (
	"errors"
	"testing"

	agentv1 "github.com/themisfs/themis/api/proto/themis/agent/v1"
	"github.com/themisfs/themis/opspec"
)

func TestValidateProfile(t *testing.T) {
	t.Parallel()
	o := ProfileOptions{}
	ops, setup, err := validateProfile(&o)
	if err != nil {
		t.Fatal(err)
	}
	if len(ops) != len(DefaultProfileOps) || len(setup) != len(DefaultProfileSetup) || o.Lanes[0] != "ext2" {
		t.Errorf("defaults: %d ops, %d setup, %+v", len(ops), len(setup), o)
	}
	for _, c := range []struct {
		o     ProfileOptions
		field string
	}{
		{ProfileOptions{Ops: []string{"chmod f 0600", "bogus"}}, "ops[1]"},
		{ProfileOptions{Ops: []string{"sync"}}, "ops[0]"},
		{ProfileOptions{Ops: []string{"write ../f 0 1"}}, "ops[0]"},
		{ProfileOptions{Lanes: []string{"vfat"}}, "lanes[0]"},
		{ProfileOptions{Setup: []string{"create f", "nope"}}, "setup[1]"},
		{ProfileOptions{MemoryMiB: 1}, "memory_mib"},
	} {
		_, _, err := validateProfile(&c.o)
		var fe *FieldError
		if !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("validateProfile(%+v) = %v, want a FieldError on %s", c.o, err, c.field)
		}
	}
}

func TestTouchedPath(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"write f 0 1": "f", "create g": "g", "mkdir d": "d", "link f l": "l", "rename f r": "r", "unlink f": "f", "chmod a/b 0600": "a/b",
	} {
		op, err := opspec.Parse(in)
		if err != nil {
			t.Fatal(err)
		}
		r, err := opspec.Request(op)
		if err != nil {
			t.Fatal(err)
		}
		if got := touchedPath(r); got != want {
			t.Errorf("touchedPath(%q) = %q, want %q", in, got, want)
		}
	}
	if got := touchedPath(&agentv1.Request{}); got != "" {
		t.Errorf("touchedPath(empty) = %q", got)
	}
}

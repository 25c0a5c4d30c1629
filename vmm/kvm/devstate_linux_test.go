package kvm

import (
	"strings"
	"testing"
)

// fakeDevice is a device whose state is one int.
type fakeDevice struct{ v int }

func (d *fakeDevice) State() int { return d.v }

func (d *fakeDevice) SetState(v int) error { d.v = v; return nil }

// TestDeviceSections: a machine's devices save and load through their
// registered sections, in order; a checkpoint of another machine's
// devices, of another count, with a state of another type, or none, is
// refused, naming what differs.
func TestDeviceSections(t *testing.T) {
	a, b := &fakeDevice{1}, &fakeDevice{2}
	var m Machine
	m.register(section("a", a.State, a.SetState))
	m.register(section("b", b.State, b.SetState))
	saved := m.saveDevices()
	a.v, b.v = 10, 20
	if err := m.loadDevices(saved); err != nil {
		t.Fatal(err)
	}
	if a.v != 1 || b.v != 2 {
		t.Fatalf("after load: a=%d b=%d, want 1 and 2", a.v, b.v)
	}

	var other Machine
	other.register(section("b", b.State, b.SetState))
	other.register(section("a", a.State, a.SetState))
	var short Machine
	short.register(section("a", a.State, a.SetState))
	var typed Machine
	s := &struct{ x string }{}
	typed.register(section("a", func() string { return s.x }, func(v string) error { s.x = v; return nil }))
	typed.register(section("b", b.State, b.SetState))
	for _, tt := range []struct {
		name string
		m    *Machine
		st   *deviceState
		want string
	}{
		{"order", &other, saved, "holds device a where this machine has b"},
		{"count", &short, saved, "no device state"},
		{"type", &typed, saved, "device a: the checkpoint holds a int"},
		{"none", &m, nil, "no device state"},
	} {
		err := tt.m.loadDevices(tt.st)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: %v, want an error saying %q", tt.name, err, tt.want)
		}
	}
}

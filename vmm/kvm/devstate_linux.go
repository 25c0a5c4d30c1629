package kvm

import (
	"errors"
	"fmt"
)

// deviceSection is one attached device's part of a checkpoint: a name,
// and how the device saves its state and loads it back. A Machine's
// devices register one each as they are made (setupDevices); saving and
// loading walk the registry, in registration order.
type deviceSection struct {
	name string
	save func() any
	load func(any) error
}

// section is the deviceSection of a device whose state is of type S.
func section[S any](name string, save func() S, load func(S) error) deviceSection {
	return deviceSection{name: name, save: func() any { return save() }, load: func(v any) error {
		s, ok := v.(S)
		if !ok {
			return fmt.Errorf("kvm: device %s: the checkpoint holds a %T", name, v)
		}
		return load(s)
	}}
}

// deviceState is the attached devices' part of a checkpoint: each
// registered device's state, by name, in registration order.
type deviceState struct {
	names  []string
	states []any
}

// register adds a device's section.
func (m *Machine) register(s deviceSection) { m.sections = append(m.sections, s) }

func (m *Machine) saveDevices() *deviceState {
	s := &deviceState{}
	for _, sec := range m.sections {
		s.names = append(s.names, sec.name)
		s.states = append(s.states, sec.save())
	}
	return s
}

func (m *Machine) loadDevices(s *deviceState) error {
	if s == nil || len(s.names) != len(m.sections) {
		return errors.New("kvm: checkpoint has no device state for this machine")
	}
	for i, sec := range m.sections {
		if s.names[i] != sec.name {
			return fmt.Errorf("kvm: checkpoint holds device %s where this machine has %s", s.names[i], sec.name)
		}
		if err := sec.load(s.states[i]); err != nil {
			return err
		}
	}
	return nil
}

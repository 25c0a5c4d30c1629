package doctor

import themisv1 "github.com/themisfs/themis/api/proto/themis/v1"

// Proto is r as `themisctl --json doctor` prints it.
func (r *Report) Proto() *themisv1.DoctorReport {
	out := &themisv1.DoctorReport{KvmDevice: r.KVMDevice, KvmHardwareVirtualization: r.KVMHardware, KvmKind: r.KVMKind, KvmWhy: r.KVMWhy,
		Qemu: r.QEMU, QemuVersion: r.QEMUVersion, CacheDir: r.CacheDir, CachedImages: int32(r.CachedImages),
		Backend: r.Backend, BackendWhy: r.BackendWhy, Revert: r.Revert, RevertWhy: r.RevertWhy, ExploreWorkers: int32(r.ExploreWorkers),
		HostToolIsolation: r.HostToolIsolation, ScratchDir: r.ScratchDir, ScratchFreeMib: r.ScratchFreeMiB,
		Boot: r.Boot.proto(), BootError: r.BootError, Problems: r.Problems}
	for _, t := range r.Tools {
		out.Tools = append(out.Tools, &themisv1.DoctorTool{Name: t.Name, Path: t.Path, Package: t.Package, Found: t.Found})
	}
	for _, l := range r.Lanes {
		out.Lanes = append(out.Lanes, &themisv1.DoctorLane{Fs: l.FS, Family: l.Family, Ready: l.Ready, Why: l.Why, Checker: l.Checker, KernelFlavor: l.Flavor})
	}
	return out
}

func (b *Boot) proto() *themisv1.DoctorBoot {
	if b == nil {
		return nil
	}
	return &themisv1.DoctorBoot{BootBackend: b.BootBackend, KernelVersion: b.KernelVersion, ImageCached: b.ImageCached,
		ImageS: b.ImageMs / 1e3, BootS: b.BootMs / 1e3, AgentRttS: b.AgentRTTUs / 1e6, CheckpointS: b.CheckpointMs / 1e3,
		RestoreS: b.RestoreMs / 1e3, RestoreMode: b.RestoreMode, RestoreVerified: b.RestoreVerified,
		Y2038Set: b.Y2038Set, Y2038Stored: b.Y2038Stored, Y2038OnDisk: b.Y2038OnDisk, Y2038Lane: b.Y2038Lane}
}

// Package nested runs commands inside an emulated AMD-V host: a QEMU/TCG
// machine with `-cpu qemu64,+svm,+npt` booting the Debian cloud kernel with
// kvm.ko and kvm-amd.ko, so that /dev/kvm in there is real kvm-amd on
// emulated silicon. The KVM backend's Linux tests need hardware
// virtualization; this is how CI runs them on hosts whose own /dev/kvm is
// PVM (docs/kvm.md).
//
// The host image (kernel + initramfs with the KVM and virtio modules and
// cmd/themis-nested-init as /init) is built by guest.Build and cached by
// content like the guest image. A job is a directory tree (test binaries,
// host tools with their shared libraries, the prebuilt guest image, a
// Plan) packed into an ext4 image with mkfs.ext4 -d; the init runs the
// plan chrooted into it and writes each step's output and a Result to
// /out, which the host reads back from the image with debugfs once the
// machine is off. The console is kept as a log, never parsed for results,
// and watched as it is written (Watcher) for the emulated host's own
// failures: Run stops the host on the first.
//
// The retry rule is a pure core: Classify reads an attempt's console and
// output for an emulator signature (the host's soft lockup, RCU stall or
// death, a guest's triple fault before ready, a silent boot), and Decide
// turns a test's attempts into pass, fail, retry or inconclusive. Only a
// signature retries; any other failure is the code's under test.
package nested

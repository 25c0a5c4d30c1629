// Package hosttool runs the host's tools (mkfs, debugfs, apt-get, dpkg-deb,
// ...) for the guest and base-image builders: [Look] finds one in PATH or
// the sbin directories a non-root PATH lacks, and names the Debian package
// to install when it is missing ([Package]); [Run], [RunEnv] and [Output]
// run it, and a failure is an [*Error] carrying its stderr.
package hosttool

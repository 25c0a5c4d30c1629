// Package reporttest reads a rendered report page back for tests: Parse
// counts the figures in its DOM (the layout maps' regions and written runs,
// the amplification curve's points, the blast-radius table's rows) and
// lists anything that would make it not self-contained (scripts, external
// URLs); DumpDOM has headless Chromium load the page from a file and
// return the DOM it built, so a test checks what a browser sees.
//
// Chromium (Debian's chromium) is looked up on PATH. Where it is missing,
// tests that need it skip with the reason, except under CI=true, where
// they fail (scripts/install-deps.sh installs it).
package reporttest

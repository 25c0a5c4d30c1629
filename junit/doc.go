// Package junit writes an explore run's outcome as a JUnit XML report, the
// format CI systems (Jenkins, GitLab, GitHub Actions' test reporters)
// read: one <testsuite> per run, one <testcase> per finding signature (a
// failure, with the finding's detail, kind, trace and ids) and one per lane
// (a failure only for what the lane shows by itself: a guest that died, a
// lane against its own references). Pure: it formats what it is given.
package junit

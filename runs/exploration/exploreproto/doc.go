// Package exploreproto is an explore run as the API names it: its
// options as the ExploreRequest they resolve to, its progress reports and
// its summary as themis.v1 messages. The daemon's Explore, Check and
// GetExploreRun send them; bench explore's report holds the summary too.
// Apart from runs/exploration, which imports no themis.v1 message.
package exploreproto

package main

import (
	"context"
	"log/slog"
	"runtime/debug"
	"time"
)

// pagePoll is how often the agent looks at its resident memory to decide
// whether to release pages again: reading /proc/self/statm is a few
// microseconds, 360 times an hour.
const pagePoll = 10 * time.Second

// pageSlack is the growth of the resident set over its idle floor that
// is worth a release: less is the idle work's own pages coming back
// (below it a release would only be undone by the next resync).
const pageSlack = 1 << 20

// pageQuiet is the growth between two polls that still counts as the
// burst being over: an idle agent's heap and a frequent resync move its
// resident set by a few pages a poll, a burst by megabytes.
const pageQuiet = 256 << 10

// keepPagesReleased releases the binary's start-up pages and heap d after
// the agent reached containerd, then again after each burst of work once
// the agent is idle (pageKeeper decides when), until ctx is done.
//
// A change (a pod replaced, an image pulled, a rollout) runs code that
// idling does not, the containerd and gRPC client's mostly, and grows the
// heap: 1.4 MiB of the binary's pages and 1 MiB of anonymous memory for
// one replaced pod. They would stay resident until memory ran short.
func keepPagesReleased(ctx context.Context, d, resync time.Duration, log *slog.Logger) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return
	case <-t.C:
	}
	// The heap start-up grew (the first reconcile, the containerd and
	// gRPC clients) goes back too: about 1 MiB of anonymous RSS.
	debug.FreeOSMemory()
	n, err := releaseBinaryPages()
	if err != nil {
		log.Debug("start-up pages not released", "err", err)
		return
	}
	log.Debug("start-up pages released", "mapped_bytes", n)

	k := newPageKeeper(pagePoll, resync)
	if rss, err := residentBytes(); err == nil {
		k.released(rss)
	}
	tick := time.NewTicker(pagePoll)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		rss, err := residentBytes()
		if err != nil {
			log.Debug("resident memory unknown; pages no longer released", "err", err)
			return
		}
		release := k.observe(rss)
		if k.since == k.settle {
			log.Debug("idle resident set learnt", "rss", rss)
		}
		if !release {
			continue
		}
		debug.FreeOSMemory()
		if _, err := releaseBinaryPages(); err != nil {
			log.Debug("pages not released", "err", err)
			return
		}
		after, err := residentBytes()
		if err != nil {
			after = rss
		}
		k.released(after)
		log.Debug("pages released again", "rss_before", rss, "rss_after", after)
	}
}

// pageKeeper decides, from the resident set sampled every poll, when to
// release again. After a release it waits a resync interval and two polls
// (settle), so that what idling uses (the periodic resync's code and
// heap) is back, and takes the lowest resident set it sees from then on
// as the idle floor. It releases when the set has stopped growing (the
// burst of work is over) and is pageSlack above that floor.
//
// A burst during the settle polls (changes right after a release) would
// be taken for the floor and stay: a floor pageSlack above the lowest
// floor seen is released once more as soon as the set stops growing; if
// the next floor is as high, the idle set did grow (more pods), and it is
// the new reference. The first floor has no lowest to compare with (the
// first desired state often lands in the start-up settle): every period
// polls, until a second floor is known, a set pageSlack above what the
// last release left is released.
type pageKeeper struct {
	settle, period int   // polls
	since          int   // polls since the last release
	low            int64 // the resident set the last release left
	floor          int64 // lowest resident set since settling
	best           int64 // lowest floor since start-up (or the idle set grown)
	floors         int   // floors learnt
	suspect        bool  // this floor is pageSlack above best: release once more
	retried        bool  // the last release was such a retry
	prev           int64 // the previous poll's resident set
}

// newPageKeeper waits at most a minute and two polls to settle: with a
// longer resync interval, the resync's own pages come back later, below
// pageSlack. The period is 5 minutes.
func newPageKeeper(poll, resync time.Duration) *pageKeeper {
	return &pageKeeper{settle: int(min(resync, time.Minute)/poll) + 2, period: int(5 * time.Minute / poll)}
}

// observe takes the resident bytes at a poll and reports whether to
// release now.
func (k *pageKeeper) observe(rss int64) bool {
	prev := k.prev
	k.prev = rss
	k.since++
	if k.since < k.settle {
		return false
	}
	if k.since == k.settle {
		k.learnFloor(rss)
		return false
	}
	k.floor = min(k.floor, rss)
	quiet := rss < prev+pageQuiet
	burst := rss >= k.floor+pageSlack || (k.suspect && rss >= k.best+pageSlack)
	stale := k.floors < 2 && k.since >= k.period && rss >= k.low+pageSlack
	if quiet && (burst || stale) {
		k.retried, k.suspect = k.suspect, false
		return true
	}
	return false
}

// learnFloor takes the resident set at the end of a settle as the floor.
func (k *pageKeeper) learnFloor(rss int64) {
	k.floor = rss
	k.floors++
	switch {
	case k.floors == 1 || rss < k.best:
		k.best = rss
	case rss >= k.best+pageSlack && !k.retried:
		k.suspect = true
	case rss >= k.best+pageSlack:
		k.best = rss // released once more and as high: the idle set grew
	}
	k.retried = false
}

// released records the resident set a release left.
func (k *pageKeeper) released(rss int64) {
	k.since, k.low, k.prev = 0, rss, rss
}

package process

import (
	"cmp"
	"slices"
	"time"
)

// demand decides how many prepared runs of each key the pool keeps: for
// every key that a request asked for in the last forgetAfter (or that was
// wanted from the start and not forgotten since), a target that starts at
// the pool's size, grows by one, up to max, each time a request of the key
// found no run of it loaded and waiting (back-to-back calls then find one),
// and shrinks by one, not below the size, each time a run of the key
// waited shrinkAfter unused (idle). With no key wanted at all, the pool
// keeps size supervisors alone (the zero key), which serve any request.
// It is not safe for concurrent use: the pool's lock guards it.
type demand struct {
	size, max int
	keys      map[poolKey]*want
}

// want is one key's target and when it was last asked for.
type want struct {
	key    poolKey
	target int
	last   time.Time
}

const (
	// shrinkAfter is how long a prepared run may wait unused before its
	// key's target shrinks.
	shrinkAfter = 30 * time.Second
	// forgetAfter is how long a key stays wanted after its last request.
	forgetAfter = 10 * time.Minute
)

// newDemand is the demand of a pool of size (its targets at most max)
// that wants the keys wanted from now on.
func newDemand(size, max int, wanted []poolKey, now time.Time) *demand {
	d := &demand{size: size, max: max, keys: map[poolKey]*want{}}
	for _, k := range wanted {
		d.keys[k] = &want{key: k, target: size, last: now}
	}
	return d
}

// asked records a request of key k at now; hit says it found a run of k
// loaded and waiting.
func (d *demand) asked(k poolKey, now time.Time, hit bool) {
	if d.size <= 0 {
		return
	}
	w, ok := d.keys[k]
	if !ok {
		w = &want{key: k, target: d.size}
		d.keys[k] = w
	} else if !hit {
		w.target = min(w.target+1, d.max)
	}
	w.last = now
}

// idle records that a run of k waited shrinkAfter unused.
func (d *demand) idle(k poolKey) {
	if w, ok := d.keys[k]; ok {
		w.target = max(w.target-1, d.size)
	}
}

// targets are the keys wanted at now with their targets, in a fixed order
// (the key asked for last first); keys not asked for since forgetAfter are
// forgotten.
func (d *demand) targets(now time.Time) []want {
	var out []want
	for k, w := range d.keys {
		if now.Sub(w.last) > forgetAfter {
			delete(d.keys, k)
			continue
		}
		out = append(out, *w)
	}
	if len(out) == 0 && d.size > 0 {
		return []want{{target: d.size, last: now}}
	}
	slices.SortFunc(out, func(a, b want) int {
		if c := b.last.Compare(a.last); c != 0 {
			return c
		}
		return cmp.Compare(a.key.lang, b.key.lang)
	})
	return out
}

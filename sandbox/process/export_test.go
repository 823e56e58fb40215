package process

// PreparedTaken is how many requests a prepared run served.
func PreparedTaken(r *Runner) int64 {
	if r.pool == nil {
		return 0
	}
	return r.pool.taken.Load()
}

// PreparedPIDs are the supervisors of the runs prepared and waiting.
func PreparedPIDs(r *Runner) []int {
	if r.pool == nil {
		return nil
	}
	r.pool.mu.Lock()
	defer r.pool.mu.Unlock()
	var pids []int
	for _, s := range r.pool.idle {
		pids = append(pids, s.prep.PID())
	}
	return pids
}

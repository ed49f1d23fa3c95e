package sim

// NewSized is New with the webhook pool's size and queue length chosen,
// so a test can fill the queue.
func NewSized(cfg Config, workers, queue int) *Sim { return newSim(cfg, workers, queue) }

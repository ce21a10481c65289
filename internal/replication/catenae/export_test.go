package catenae

// SetMutationForTest breaks every replica of e (running or to come) as mutation says.
func SetMutationForTest(e *Engine, mutation string) {
	e.cfg.Mutation = mutation
	for _, k := range e.keyspaces {
		k.opts.Mutation = mutation
		if k.rep != nil {
			if err := k.rep.SetMutation(mutation); err != nil {
				panic(err)
			}
		}
	}
}

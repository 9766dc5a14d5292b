package postgres

// collectBatches is the loop of a group-commit committer: it blocks for one request, takes
// whatever else is already waiting (up to maxBatch), and hands the batch to commit. Batches form
// on their own from concurrency: a lone request is committed at once, and requests that arrive
// while a commit is in progress share the next one. It returns when stop is closed.
func collectBatches[T any](queue <-chan T, stop <-chan struct{}, maxBatch int, commit func([]T)) {
	for {
		var first T
		select {
		case first = <-queue:
		case <-stop:
			return
		}
		batch := []T{first}
	drain:
		for len(batch) < maxBatch {
			select {
			case c := <-queue:
				batch = append(batch, c)
			default:
				break drain
			}
		}
		commit(batch)
	}
}

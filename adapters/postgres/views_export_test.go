package postgres

// ViewColumns are the views' column lists as (name, type) pairs in their order, for a test to
// hold them to the migrated tables and to the rows' db tags.
var ViewColumns = map[string][][2]string{
	"status_view": statusColumns.pairs(),
	"dlq_view":    dlqColumns.pairs(),
}

func (cs columns[R]) pairs() [][2]string {
	out := make([][2]string, len(cs))
	for i, c := range cs {
		out[i] = [2]string{c.name, c.sqlType}
	}
	return out
}

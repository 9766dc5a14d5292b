package tracing

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
)

// DBTracer gives database statements client spans (semantic conventions for database calls):
// named by what the statement does ("INSERT events", "SELECT status_view"), with the statement's
// text but never its arguments, which hold tenants' payloads and recipients. Only statements of
// a traced operation get a span: the relay's polls and the projector's reads, which run for
// no request, would otherwise fill the backend with traces of their own. A pgx batch is one span
// (one round trip), named by its statements.
type DBTracer struct{}

var (
	_ pgx.QueryTracer = DBTracer{}
	_ pgx.BatchTracer = DBTracer{}
)

// maxQueryText bounds db.query.text: the ledger's statements are short, but a tenant's
// database could be given a longer one by an operator's tool.
const maxQueryText = 2048

type dbSpanKey struct{}

func (DBTracer) start(ctx context.Context, name string, attrs ...attribute.KeyValue) context.Context {
	if !Enabled() || !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx
	}
	attrs = append(attrs, semconv.DBSystemNamePostgreSQL)
	ctx, span := Tracer().Start(ctx, name, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	return context.WithValue(ctx, dbSpanKey{}, span)
}

func (DBTracer) end(ctx context.Context, err error) {
	span, ok := ctx.Value(dbSpanKey{}).(trace.Span)
	if !ok {
		return
	}
	Fail(span, err)
	span.End()
}

// TraceQueryStart starts a statement's span.
func (t DBTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	summary := Summarize(data.SQL)
	return t.start(ctx, summary, semconv.DBQuerySummary(summary), semconv.DBOperationName(firstWord(summary)),
		semconv.DBQueryText(clip(data.SQL)))
}

// TraceQueryEnd ends it.
func (t DBTracer) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryEndData) {
	t.end(ctx, data.Err)
}

// TraceBatchStart starts a batch's span, named once its statements are known (TraceBatchQuery).
func (t DBTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	if data.Batch == nil {
		return t.start(ctx, "BATCH")
	}
	var names []string
	for _, q := range data.Batch.QueuedQueries {
		s := Summarize(q.SQL)
		if s == "SET" || s == "BEGIN" || s == "COMMIT" {
			continue
		}
		if len(names) == 0 || names[len(names)-1] != s {
			names = append(names, s)
		}
	}
	name := "BATCH " + strings.Join(names, ", ")
	if len(names) > 4 {
		name = "BATCH " + strings.Join(names[:4], ", ") + ", …"
	}
	return t.start(ctx, name, semconv.DBOperationName("BATCH"), semconv.DBOperationBatchSize(data.Batch.Len()),
		semconv.DBQuerySummary(name))
}

// TraceBatchQuery records a failed statement of the batch.
func (t DBTracer) TraceBatchQuery(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchQueryData) {
	if data.Err == nil {
		return
	}
	if span, ok := ctx.Value(dbSpanKey{}).(trace.Span); ok {
		span.AddEvent("statement failed", trace.WithAttributes(semconv.DBQueryText(clip(data.SQL))))
	}
}

// TraceBatchEnd ends the batch's span.
func (t DBTracer) TraceBatchEnd(ctx context.Context, _ *pgx.Conn, data pgx.TraceBatchEndData) {
	t.end(ctx, data.Err)
}

// Summarize names a statement by its operation and the first table it names: "SELECT events",
// "INSERT status_view", "WITH status_view". Arguments never appear: they are placeholders.
func Summarize(sql string) string {
	words := strings.Fields(sql)
	if len(words) == 0 {
		return "SQL"
	}
	op := strings.ToUpper(words[0])
	for i := 1; i < len(words)-1; i++ {
		switch strings.ToUpper(words[i]) {
		case "FROM", "INTO", "UPDATE", "JOIN", "TABLE":
			table, _, _ := strings.Cut(words[i+1], "(")
			if table = strings.Trim(table, `"),;`); table != "" && !strings.HasPrefix(table, "$") &&
				!strings.EqualFold(table, "unnest") && !strings.EqualFold(table, "SELECT") {
				return op + " " + table
			}
		}
	}
	if op == "UPDATE" && len(words) > 1 {
		return op + " " + strings.Trim(words[1], `"`)
	}
	return op
}

func firstWord(s string) string {
	op, _, _ := strings.Cut(s, " ")
	return op
}

func clip(s string) string {
	if len(s) <= maxQueryText {
		return s
	}
	return s[:maxQueryText] + "…"
}

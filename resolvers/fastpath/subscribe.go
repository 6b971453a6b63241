package fastpath

import (
	"context"

	"github.com/99designs/gqlgen/graphql"

	"github.com/tally-dev/tally/resolvers/auth"
)

// subscribe serves an unreadChanged subscription whose selection needs
// nothing but the badges the resolver already read: each event costs that
// one read (the resolver's) and one encoding by the plan, with no executor
// run. It returns nil when gqlgen must serve the subscription (an
// anonymous or bad token, which gqlgen reports; a resolver error, which
// gqlgen reports by running the resolver itself).
func (s *Schema) subscribe(ctx context.Context, opCtx *graphql.OperationContext, p *plan) graphql.ResponseHandler {
	if pr, err := auth.From(ctx); err != nil || pr.User == 0 {
		return nil
	}
	events, err := s.cfg.UnreadChanged(ctx)
	if err != nil {
		return nil
	}
	served.Add(1)
	root := &p.root[0]
	// Field middleware (the metrics extension times an event from it)
	// sees one resolver call per event, as with gqlgen's executor.
	fc := &graphql.FieldContext{Object: "Subscription", IsResolver: true, IsMethod: true}
	if fields := graphql.CollectFields(opCtx, opCtx.Operation.SelectionSet, []string{"Subscription"}); len(fields) == 1 {
		fc.Field = fields[0]
	}
	return func(rctx context.Context) *graphql.Response {
		select {
		case v, ok := <-events:
			if !ok || v == nil {
				return nil
			}
			u := v.Unread
			if u == nil {
				read, err := s.cfg.Store.Unread(rctx, v.UserID)
				if err != nil {
					graphql.AddError(graphql.WithPathContext(rctx, graphql.NewPathWithField(fc.Field.Alias)), err)
					return &graphql.Response{Data: []byte("null")}
				}
				u = &read
			}
			opCtx.ResolverMiddleware(graphql.WithFieldContext(rctx, fc), func(context.Context) (any, error) { return v, nil })
			buf := make([]byte, 0, p.sizeHint.Load()+16)
			buf = append(buf, '{')
			buf = append(buf, root.key...)
			buf = writeViewer(buf, root.obj, nil, v.UserID, u)
			buf = append(buf, '}')
			p.sizeHint.Store(int64(len(buf)))
			return &graphql.Response{Data: buf}
		case <-rctx.Done():
			return nil
		}
	}
}

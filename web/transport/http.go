package transport

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/tally-dev/tally/resolvers"
	"github.com/tally-dev/tally/web/fastpath"
)

// GraphQL over HTTP, as the GraphQL-over-HTTP spec
// (https://graphql.github.io/graphql-over-http/draft/) asks.
//
// These transports replace gqlgen's transport.GET and transport.POST,
// which (v0.17.95) answer a parse or validation failure requested as
// application/json with 422 (Apollo Client 3 then reports only "Received
// status code 422"), write request errors with "data": null, echo the
// request body and Go type names when it does not decode ("json: cannot
// unmarshal number into Go struct field …"), and write transport errors
// without extensions.code. Wrapping them would mean rewriting their
// output after the fact; the request handling itself is short, so it is
// done here and gqlgen still parses, validates and executes.
//
//   - Accept negotiates the response: application/graphql-response+json
//     when the client asks for it, application/json otherwise (also for
//     */*, application/* and no Accept at all, as the spec's legacy rule
//     says). A client that accepts neither gets application/json anyway:
//     the spec allows ignoring Accept, and a body is more use than a 406.
//   - Under application/json every well-formed request gets 200, request
//     errors included; under application/graphql-response+json a response
//     without data gets a 4xx (or 500 for INTERNAL).
//   - A request that is not well-formed (not JSON, not an object, a
//     parameter of the wrong type, no query) gets 400 whatever it accepts;
//     a body over the limit 413; an unsupported Content-Type 415; a
//     mutation over GET 405 (the spec's MUST) with Allow: POST; any method
//     but GET, POST and OPTIONS 405.
//   - Every error written carries extensions.code, and no message quotes
//     the body or names a Go type.

const (
	mediaJSON            = "application/json"
	mediaGraphQLResponse = "application/graphql-response+json"
)

// responseMedia picks the response's media type from an Accept header:
// the supported type with the highest q, the first listed on a tie.
func responseMedia(accept string) string {
	if strings.TrimSpace(accept) == "" {
		return mediaJSON
	}
	best, bestQ := mediaJSON, -1.0
	for part := range strings.SplitSeq(accept, ",") {
		mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil {
			continue
		}
		var media string
		switch mt {
		case mediaGraphQLResponse:
			media = mediaGraphQLResponse
		case mediaJSON, "application/*", "*/*":
			media = mediaJSON
		default:
			continue
		}
		q := 1.0
		if s, ok := params["q"]; ok {
			if v, err := strconv.ParseFloat(s, 64); err == nil {
				q = v
			}
		}
		if q > bestQ && q > 0 {
			best, bestQ = media, q
		}
	}
	return best
}

// wantsEventStream reports whether the request asks for a stream (SSE,
// multipart) and accepts no JSON at all: those belong to a streaming
// transport, not to ours. A client that lists a stream and JSON (GraphiQL
// may) gets JSON.
func wantsEventStream(r *http.Request) bool {
	a := r.Header.Get("Accept")
	if !strings.Contains(a, "text/event-stream") && !strings.Contains(a, "multipart/mixed") {
		return false
	}
	for part := range strings.SplitSeq(a, ",") {
		mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil || params["q"] == "0" {
			continue
		}
		switch mt {
		case mediaJSON, mediaGraphQLResponse, "application/*", "*/*":
			return false
		}
	}
	return true
}

// httpResponse is graphql.Response as written over HTTP: without a data
// key when there is no data (a request error), as the spec asks, where
// gqlgen's type always writes "data".
type httpResponse struct {
	Errors     gqlerror.List   `json:"errors,omitempty"`
	Data       json.RawMessage `json:"data,omitempty"`
	Extensions map[string]any  `json:"extensions,omitempty"`
}

// writeGraphQL writes resp with the negotiated media type. status 0 means
// the spec's status for resp: 200, except a response without data under
// application/graphql-response+json, which gets statusForCode.
func writeGraphQL(w http.ResponseWriter, media string, status int, resp *graphql.Response) {
	if resp == nil {
		resp = errorResponse(resolvers.CodeInternal, "no response")
	}
	if status == 0 {
		status = http.StatusOK
		if media == mediaGraphQLResponse && len(resp.Data) == 0 {
			status = statusForErrors(resp.Errors)
		}
	}
	bp := responseBuffers.Get().(*[]byte)
	b, err := appendResponse((*bp)[:0], resp)
	if err != nil {
		// Only an unencodable extension value can get here.
		b, _ = json.Marshal(httpResponse{Errors: errorResponse(resolvers.CodeInternal, "internal error").Errors})
		status = http.StatusInternalServerError
	}
	writeBody(w, media, status, b)
	// A Write keeps nothing of b (io.Writer's contract), so the buffer
	// serves the next response; an occasional large one is let go.
	if err == nil {
		*bp = b
		putResponseBuffer(bp)
	}
}

// writeBody writes a response body b with the headers every GraphQL
// response carries.
func writeBody(w http.ResponseWriter, media string, status int, b []byte) {
	h := w.Header()
	ct := "application/json; charset=utf-8"
	if media == mediaGraphQLResponse {
		ct = "application/graphql-response+json; charset=utf-8"
	}
	h.Set("Content-Type", ct)
	h.Add("Vary", "Accept") // the status and media type follow it
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	w.Write(b)
}

// dataPrefix begins a response that has data and nothing before it.
const dataPrefix = `{"data":`

// writeResponse writes the response to an operation. into is the
// buffer handed to the operation's plan (fastpath.WithResponseBuffer),
// holding dataPrefix: when resp's data is what a plan appended there and
// the response has nothing else, the body is into's bytes and a closing
// brace, as appendResponse would write it, without another copy. Either
// way into goes back to the pool (nothing holds resp once written).
func writeResponse(w http.ResponseWriter, media string, resp *graphql.Response, into *[]byte) {
	if into == nil {
		writeGraphQL(w, media, 0, resp)
		return
	}
	buf := *into
	if resp != nil && len(resp.Errors) == 0 && len(resp.Extensions) == 0 && len(resp.Data) > 0 &&
		len(buf) == len(dataPrefix)+len(resp.Data) && &buf[len(dataPrefix)] == &resp.Data[0] {
		buf = append(buf, '}')
		writeBody(w, media, http.StatusOK, buf)
	} else {
		writeGraphQL(w, media, 0, resp)
	}
	*into = buf
	putResponseBuffer(into)
}

// responseBuffers hold responses while they are written.
var responseBuffers = sync.Pool{New: func() any { return new([]byte) }}

func putResponseBuffer(bp *[]byte) {
	if cap(*bp) <= maxPooledResponse {
		*bp = (*bp)[:0]
		responseBuffers.Put(bp)
	}
}

const maxPooledResponse = 256 << 10

// encodeResponse writes resp as httpResponse would marshal, except that
// Data, which gqlgen and the fast path's plans both produce as compact,
// valid JSON, is copied as it is: json.Marshal would re-scan and compact a
// RawMessage byte by byte, which costs more than producing a feed page.
func encodeResponse(resp *graphql.Response) ([]byte, error) {
	return appendResponse(nil, resp)
}

// appendResponse is encodeResponse appending to out.
func appendResponse(out []byte, resp *graphql.Response) ([]byte, error) {
	if need := len(resp.Data) + 32; cap(out) < need {
		out = make([]byte, 0, need)
	}
	out = append(out, '{')
	field := func(name string) {
		if len(out) > 1 {
			out = append(out, ',')
		}
		out = append(out, '"')
		out = append(out, name...)
		out = append(out, '"', ':')
	}
	if len(resp.Errors) > 0 {
		errs, err := json.Marshal(resp.Errors)
		if err != nil {
			return nil, err
		}
		field("errors")
		out = append(out, errs...)
	}
	if len(resp.Data) > 0 {
		field("data")
		out = append(out, resp.Data...)
	}
	if len(resp.Extensions) > 0 {
		ext, err := json.Marshal(resp.Extensions)
		if err != nil {
			return nil, err
		}
		field("extensions")
		out = append(out, ext...)
	}
	return append(out, '}'), nil
}

// statusForErrors is the status of a response without data under
// application/graphql-response+json, from its first error's code.
func statusForErrors(errs gqlerror.List) int {
	code := ""
	if len(errs) > 0 {
		code, _ = errs[0].Extensions["code"].(string)
	}
	switch code {
	case resolvers.CodeUnauthenticated:
		return http.StatusUnauthorized
	case resolvers.CodeForbidden:
		return http.StatusForbidden
	case resolvers.CodeNotFound:
		return http.StatusNotFound
	case resolvers.CodeRateLimited:
		return http.StatusTooManyRequests
	case resolvers.CodeUnavailable:
		return http.StatusServiceUnavailable
	case resolvers.CodeInternal:
		return http.StatusInternalServerError
	}
	return http.StatusBadRequest
}

// writeRequestError answers a request that never reached GraphQL (bad
// method, media type, body) with status and one error carrying code.
func writeRequestError(w http.ResponseWriter, r *http.Request, status int, code, msg string) {
	writeGraphQL(w, responseMedia(r.Header.Get("Accept")), status, errorResponse(code, msg))
}

// httpTransport serves queries and mutations over POST and queries over
// GET.
type httpTransport struct {
	maxBody int64
	// fast, when set, makes the operation context of plan-served queries
	// (plan_context.go), and POST bodies are decoded by hand
	// (http_decode.go); nil keeps both gqlgen's and encoding/json's, which
	// the differential tests compare against.
	fast *planContexts
}

var _ graphql.Transport = httpTransport{}

func (httpTransport) Supports(r *http.Request) bool {
	return r.Header.Get("Upgrade") == "" && !wantsEventStream(r) &&
		(r.Method == http.MethodGet || r.Method == http.MethodPost)
}

func (t httpTransport) Do(w http.ResponseWriter, r *http.Request, exec graphql.GraphExecutor) {
	start := graphql.Now()
	var params *graphql.RawParams
	var err *requestError
	shared := false // params' variables share the body's memory
	if r.Method == http.MethodGet {
		params, err = getParams(r)
	} else {
		params, shared, err = t.postParams(w, r)
	}
	if err != nil {
		if err.status == http.StatusMethodNotAllowed {
			w.Header().Set("Allow", err.allow)
		}
		writeRequestError(w, r, err.status, resolvers.CodeBadUserInput, err.msg)
		return
	}
	params.Headers = r.Header
	params.ReadTime = graphql.TraceTiming{Start: start, End: graphql.Now()}
	media := responseMedia(r.Header.Get("Accept"))
	ctx := r.Context()

	var opCtx *graphql.OperationContext
	var errs gqlerror.List
	fast := false
	if t.fast != nil {
		opCtx, errs, fast = t.fast.operationContext(ctx, params)
	}
	if !fast {
		if shared && params.Variables != nil {
			params.Variables = ownStrings(params.Variables).(map[string]any)
		}
		opCtx, errs = exec.CreateOperationContext(ctx, params)
	}
	if observeOperation != nil {
		observeOperation(opCtx, errs, fast)
	}
	if errs != nil {
		writeGraphQL(w, media, 0, exec.DispatchError(graphql.WithOperationContext(ctx, opCtx), errs))
		return
	}
	switch op := opCtx.Operation.Operation; {
	case r.Method == http.MethodGet && op != ast.Query:
		// The spec's MUST: GET is a safe method, so a mutation over GET
		// is refused before it runs, pointing at POST.
		w.Header().Set("Allow", "POST")
		noteOperation(ctx, opCtx)
		writeRequestError(w, r, http.StatusMethodNotAllowed, resolvers.CodeBadUserInput,
			fmt.Sprintf("a %s needs POST: GET runs queries only", op))
		return
	case op == ast.Subscription:
		noteOperation(ctx, opCtx)
		writeGraphQL(w, media, 0, exec.DispatchError(graphql.WithOperationContext(ctx, opCtx), gqlerror.List{{
			Message:    "subscriptions run over a WebSocket on this endpoint (subprotocol graphql-transport-ws), not over plain HTTP",
			Extensions: map[string]any{"code": resolvers.CodeBadUserInput},
		}}))
		return
	}
	var into *[]byte // the response buffer a plan appends to
	if t.fast != nil {
		into = responseBuffers.Get().(*[]byte)
		*into = append((*into)[:0], dataPrefix...)
		ctx = fastpath.WithResponseBuffer(ctx, into)
	}
	responses, ctx := exec.DispatchOperation(ctx, opCtx)
	writeResponse(w, media, responses(ctx), into)
	if t.fast != nil && !fast {
		t.fast.learn(opCtx)
	}
}

// requestError is a request that is not well-formed GraphQL over HTTP.
type requestError struct {
	status int
	msg    string
	allow  string // for 405
}

func badRequest(format string, args ...any) *requestError {
	return &requestError{status: http.StatusBadRequest, msg: fmt.Sprintf(format, args...)}
}

func getParams(r *http.Request) (*graphql.RawParams, *requestError) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return nil, badRequest("the URL's query string is not valid form encoding")
	}
	p := &graphql.RawParams{Query: q.Get("query"), OperationName: q.Get("operationName")}
	if v := q.Get("variables"); v != "" {
		if p.Variables, err = decodeObject([]byte(v)); err != nil {
			return nil, badRequest("the variables parameter must be a JSON object: %v", err)
		}
	}
	if v := q.Get("extensions"); v != "" {
		if p.Extensions, err = decodeObject([]byte(v)); err != nil {
			return nil, badRequest("the extensions parameter must be a JSON object: %v", err)
		}
	}
	if p.Query == "" && p.Extensions["persistedQuery"] == nil {
		return nil, badRequest("the request has no query parameter")
	}
	return p, nil
}

func (t httpTransport) postParams(w http.ResponseWriter, r *http.Request) (params *graphql.RawParams, shared bool, rerr *requestError) {
	ct := r.Header.Get("Content-Type")
	mt, mparams, err := mime.ParseMediaType(ct)
	if ct == "" || err != nil || mt != mediaJSON {
		shown := mt
		if err != nil || len(shown) > 60 {
			shown = "unparsable"
		}
		if ct == "" {
			shown = "none"
		}
		return nil, false, &requestError{status: http.StatusUnsupportedMediaType,
			msg: fmt.Sprintf("a POST body must be Content-Type: application/json (got %s)", shown)}
	}
	if cs, ok := mparams["charset"]; ok && !strings.EqualFold(cs, "utf-8") {
		return nil, false, &requestError{status: http.StatusUnsupportedMediaType,
			msg: "a POST body must be UTF-8 (charset=utf-8 or none)"}
	}
	limit := t.maxBody
	if limit <= 0 {
		limit = 1 << 20
	}
	bp := bodyBuffers.Get().(*[]byte)
	defer func() {
		if cap(*bp) <= maxPooledBody {
			bodyBuffers.Put(bp)
		}
	}()
	body, err := readBody(http.MaxBytesReader(w, r.Body, limit), (*bp)[:0], r.ContentLength)
	*bp = body[:0]
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return nil, false, &requestError{status: http.StatusRequestEntityTooLarge,
				msg: fmt.Sprintf("request body is over the limit of %d bytes", limit)}
		}
		return nil, false, badRequest("the request body could not be read")
	}
	if t.fast != nil {
		if p, ok := decodeBodyFast(string(body)); ok {
			return p, true, nil
		}
	}
	params, rerr = paramsFromBody(body)
	return params, false, rerr
}

// bodyBuffers hold request bodies while they are decoded (nothing
// decoded keeps a reference: both decoders copy what they return);
// maxPooledBody keeps an occasional large body's buffer out of the pool.
var bodyBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}

const maxPooledBody = 64 << 10

// readBody reads r to its end into buf, sized from the request's
// Content-Length when it gives one.
func readBody(r io.Reader, buf []byte, contentLength int64) ([]byte, error) {
	if contentLength > 0 && contentLength < 1<<30 && int64(cap(buf)) < contentLength+1 {
		buf = make([]byte, 0, contentLength+1) // +1: the read that sees EOF
	}
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
}

// paramsFromBody decodes a POST body with encoding/json and checks its
// parameters' types, writing what is wrong.
func paramsFromBody(body []byte) (*graphql.RawParams, *requestError) {
	if len(bytes.TrimSpace(body)) == 0 {
		return nil, badRequest(`the request body is empty: send {"query": "..."}`)
	}
	fields, err := decodeObject(body)
	if err != nil {
		return nil, badRequest("the request body must be a JSON object: %v", err)
	}
	p := &graphql.RawParams{}
	for k, v := range fields {
		switch k {
		case "query":
			s, ok := v.(string)
			if v != nil && !ok {
				return nil, badRequest("query must be a string, not %s", jsonKind(v))
			}
			p.Query = s
		case "operationName":
			s, ok := v.(string)
			if v != nil && !ok {
				return nil, badRequest("operationName must be a string or null, not %s", jsonKind(v))
			}
			p.OperationName = s
		case "variables":
			m, ok := v.(map[string]any)
			if v != nil && !ok {
				return nil, badRequest("variables must be an object or null, not %s", jsonKind(v))
			}
			p.Variables = m
		case "extensions":
			m, ok := v.(map[string]any)
			if v != nil && !ok {
				return nil, badRequest("extensions must be an object or null, not %s", jsonKind(v))
			}
			p.Extensions = m
		}
	}
	if p.Query == "" && p.Extensions["persistedQuery"] == nil {
		return nil, badRequest(`the request has no query: send {"query": "..."}`)
	}
	return p, nil
}

// decodeObject decodes one JSON object (numbers kept as json.Number, as
// gqlgen's coercion expects). Its errors say what is wrong in JSON's
// terms and where, never in Go's.
func decodeObject(b []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, jsonSyntaxError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("unexpected data after the object (at byte %d)", dec.InputOffset())
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("got %s", jsonKind(v))
	}
	return m, nil
}

func jsonSyntaxError(err error) error {
	if se, ok := errors.AsType[*json.SyntaxError](err); ok {
		return fmt.Errorf("invalid JSON at byte %d", se.Offset)
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return errors.New("invalid JSON: it ends too early")
	}
	return errors.New("invalid JSON")
}

// jsonKind names a decoded JSON value's kind as JSON does.
func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return "an unknown value"
}

// refuseTransport answers every request the others do not take: OPTIONS
// (the methods allowed), and a clear 405 or 406 for the rest, where
// gqlgen would write "transport not supported" without a code.
type refuseTransport struct{}

var _ graphql.Transport = refuseTransport{}

func (refuseTransport) Supports(*http.Request) bool { return true }

func (refuseTransport) Do(w http.ResponseWriter, r *http.Request, _ graphql.GraphExecutor) {
	switch {
	case r.Method == http.MethodOptions:
		w.Header().Set("Allow", "GET, POST, OPTIONS")
		w.WriteHeader(http.StatusNoContent)
	case r.Header.Get("Upgrade") != "":
		writeRequestError(w, r, http.StatusBadRequest, resolvers.CodeBadUserInput,
			"a WebSocket on this endpoint needs the subprotocol graphql-transport-ws")
	case r.Method == http.MethodGet || r.Method == http.MethodPost:
		writeRequestError(w, r, http.StatusNotAcceptable, resolvers.CodeBadUserInput,
			"this endpoint answers application/json or application/graphql-response+json, not streams; subscriptions use a WebSocket")
	default:
		w.Header().Set("Allow", "GET, POST, OPTIONS")
		method := r.Method
		if len(method) > 40 {
			method = method[:40] + "…" // a method is any token: echo a bounded part
		}
		writeRequestError(w, r, http.StatusMethodNotAllowed, resolvers.CodeBadUserInput,
			fmt.Sprintf("method %s is not allowed: use POST (or GET for queries)", method))
	}
}

// noteOperation records what a request was for the access log (see
// requestInfo), for requests refused before the operation runs.
func noteOperation(ctx context.Context, opCtx *graphql.OperationContext) {
	if ri := requestInfoFrom(ctx); ri != nil && opCtx != nil && opCtx.Operation != nil {
		ri.setOperation(string(opCtx.Operation.Operation), opCtx.Operation.Name)
	}
}

package photon

import (
	"errors"
	"math"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"photon.sdk/photon/internal/native"
)

// ErrBusy matches (errors.Is) the *Error of a submit refused because the engine's waiting queue
// is full: submit again later.
var ErrBusy = errors.New("photon: the engine's waiting queue is full")

// Is makes errors.Is(err, ErrBusy) true for PHOTON_ERR_BUSY.
func (e *Error) Is(target error) bool {
	return target == ErrBusy && e.StatusName == "PHOTON_ERR_BUSY"
}

// EngineOptions are the settings of an engine; zero fields keep the defaults.
type EngineOptions struct {
	MaxRunning   int    // the most requests that run at once; 0: 64
	MaxWaiting   int    // the most that wait for admission (Submit beyond: ErrBusy); 0: 1024
	MemoryBudget uint64 // the most bytes the running requests' sessions hold; 0: no limit
	StepTokens   int    // the most prompt tokens a step consumes; 0: 512
	// PrefixCache is the most bytes of saved prompt sessions (host memory, outside MemoryBudget);
	// 0: none. A request whose prompt begins with a prompt read before starts from its save, those
	// tokens counted in RequestStats.ReusedTokens, and generates what reading its whole prompt
	// would.
	PrefixCache uint64
}

// Engine serves generation requests over one model with continuous batching: requests submitted
// from any goroutine run together, stepped by the engine's own worker (Start, Stop) or by the
// caller's loop (Step). Its methods may be called from many goroutines at once.
//
// An Engine keeps its model's native part alive, and each Request its engine's, so any of them
// may be closed first; the native engine (and its worker) goes once neither the Engine nor any of
// its requests holds it.
type Engine struct {
	native native.Engine
	closed atomic.Bool
}

// NewEngine creates an engine over the model; options may be nil for the defaults.
func (m *Model) NewEngine(options *EngineOptions) (*Engine, error) {
	if m.native == nil {
		return nil, ErrClosed
	}
	defer runtime.KeepAlive(m)
	var o EngineOptions
	if options != nil {
		o = *options
	}
	for _, field := range []struct {
		name  string
		value int
	}{{"MaxRunning", o.MaxRunning}, {"MaxWaiting", o.MaxWaiting}, {"StepTokens", o.StepTokens}} {
		if err := int32Arg(field.name, field.value); err != nil {
			return nil, err
		}
	}
	var created native.Engine
	var settings native.EngineOptions
	err := call(func() {
		settings = native.NewEngineOptions()
		steps := []func(){
			func() {
				if o.MaxRunning != 0 {
					settings.SetMaxRunning(o.MaxRunning)
				}
			},
			func() {
				if o.MaxWaiting != 0 {
					settings.SetMaxWaiting(o.MaxWaiting)
				}
			},
			func() { settings.SetMemoryBudget(o.MemoryBudget) },
			func() {
				if o.StepTokens != 0 {
					settings.SetStepTokens(o.StepTokens)
				}
			},
			func() { settings.SetPrefixCache(o.PrefixCache) },
			func() { created = native.NewEngine(m.native, settings) },
		}
		for _, step := range steps {
			if step(); native.LastStatus() != 0 {
				return
			}
		}
	})
	if settings != nil { // deleted after the call, which reads the status of its last step
		native.DeleteEngineOptions(settings)
	}
	if err != nil {
		return nil, err
	}
	e := &Engine{native: created}
	runtime.SetFinalizer(e, func(e *Engine) { native.DeleteEngine(e.native) })
	return e, nil
}

// run calls f on the engine's native part unless the engine was closed.
func (e *Engine) run(f func(native.Engine)) error {
	if e.closed.Load() {
		return ErrClosed
	}
	defer runtime.KeepAlive(e)
	return call(func() { f(e.native) })
}

// Close releases this handle; the native engine and its worker go once its requests are closed
// too (Stop first to drain or cancel them). Idempotent.
func (e *Engine) Close() error {
	if !e.closed.Swap(true) {
		e.native.Close()
		runtime.KeepAlive(e)
	}
	return nil
}

// Start starts the engine's worker thread, which runs steps while there is work.
func (e *Engine) Start() error {
	return e.run(func(n native.Engine) { n.Start() })
}

// Stop stops the worker and returns once it has ended: drain finishes every request submitted so
// far, otherwise every unfinished request is cancelled.
func (e *Engine) Stop(drain bool) error {
	return e.run(func(n native.Engine) { n.Stop(drain) })
}

// Step runs one step on the calling goroutine (not while the worker runs) and returns the number
// of requests not finished yet.
func (e *Engine) Step() (int, error) {
	unfinished := 0
	if err := e.run(func(n native.Engine) { unfinished = n.Step() }); err != nil {
		return 0, err
	}
	return unfinished, nil
}

// RequestOptions describe a request: a prompt (Prompt, or PromptText tokenized at submit with BOS
// first unless a state or session is continued), a saved state (State: the bytes of Session.Save
// or Request.Save) or a live Session to continue (the request takes it over: the Session is
// closed then, Request.TakeSession gives it back), session options (the sampler of a continued
// state or session), and the most tokens to generate (MaxTokens; 0: up to the context length).
//
// OnToken, if set, receives each token on the thread that runs the engine's steps and returns nil
// to go on, ErrStop to stop this request, or another error to stop it and have Request.Wait return
// that error; a panic in OnToken stops the request and is re-raised by Request.Wait. Without
// OnToken, pull the tokens with Request.Tokens.
type RequestOptions struct {
	Prompt     []int32
	PromptText string
	State      []byte
	Session    *Session
	Options    *SessionOptions
	MaxTokens  int
	OnToken    func(Token) error
}

// Submit submits a request and returns its Request at once (keep it: a request closed or
// collected before it finished is cancelled). A full waiting queue returns an *Error that matches
// ErrBusy.
func (e *Engine) Submit(r RequestOptions) (*Request, error) {
	if err := int32Arg("MaxTokens", r.MaxTokens); err != nil {
		return nil, err
	}
	if r.MaxTokens < 0 {
		return nil, &Error{
			Status:     1,
			StatusName: "PHOTON_ERR_INVALID_ARGUMENT",
			Message:    "photon: MaxTokens must be >= 0 (0: up to the context length)",
		}
	}
	if r.Session != nil && r.Session.native == nil {
		return nil, ErrClosed
	}
	var settings native.SessionOptions
	if r.Options != nil {
		var err error
		if settings, err = r.Options.build(); err != nil {
			return nil, err
		}
		defer native.DeleteSessionOptions(settings)
	}
	request := &Request{}
	if r.OnToken != nil {
		request.listener = &requestListener{onToken: r.OnToken}
	}
	var submitted native.Request
	var o native.RequestOptions
	err := e.run(func(n native.Engine) {
		o = native.NewRequestOptions()
		steps := []func(){
			func() {
				if r.Prompt != nil {
					o.SetPrompt(r.Prompt)
				} else if r.PromptText != "" {
					o.SetPromptText(r.PromptText)
				}
			},
			func() {
				if r.State != nil {
					o.SetState(r.State)
				}
			},
			func() {
				if r.Session != nil {
					o.SetSession(r.Session.native)
				}
			},
			func() {
				if settings != nil {
					o.SetOptions(settings)
				}
			},
			func() {
				if r.MaxTokens > 0 {
					o.SetMaxTokens(r.MaxTokens)
				}
			},
			func() {
				if request.listener == nil {
					submitted = n.SubmitPulled(o)
				} else { // the native request owns the director from here, also if this fails
					director := native.NewDirectorTokenListener(request.listener)
					request.listener.director = director
					submitted = n.SubmitWithListener(o, director)
				}
			},
		}
		for _, step := range steps {
			if step(); native.LastStatus() != 0 {
				return
			}
		}
	})
	if o != nil { // deleted after the call, which reads the status of its last step
		native.DeleteRequestOptions(o)
	}
	runtime.KeepAlive(r.Session)
	if err != nil {
		return nil, err
	}
	request.native = submitted
	runtime.SetFinalizer(request, func(r *Request) { native.DeleteRequest(r.native) })
	return request, nil
}

// EngineStats are an engine's statistics at one moment.
type EngineStats struct {
	Waiting, Running, Paused       int64   // requests now
	Submitted, Refused, Finished   int64   // requests accepted, refused as busy, ended: in all
	Failed, Cancelled              int64   // of those ended, by an error, cancelled
	PromptTokens, ReusedTokens     int64   // prompt tokens consumed, tokens continued: in all
	GeneratedTokens, Pauses, Steps int64   // tokens delivered, pauses, steps that did work
	MemoryInUse, MemoryPeak        uint64  // bytes the requests' sessions hold now, at most
	TokensPerSecond                float64 // tokens delivered per second over the last 10 s
	PrefixHits                     int64   // requests restored from the prefix cache, in all
	PrefixBytes                    uint64  // bytes the prefix cache holds now
}

// Stats returns the engine's statistics now.
func (e *Engine) Stats() (EngineStats, error) {
	var s EngineStats
	err := e.run(func(n native.Engine) {
		stats := n.Stats()
		// The native layer hands back a snapshot whether or not the call failed.
		defer native.DeleteEngineStats(stats)
		if native.LastStatus() != 0 {
			return
		}
		s = EngineStats{
			Waiting: stats.GetWaiting(), Running: stats.GetRunning(), Paused: stats.GetPaused(),
			Submitted: stats.GetSubmitted(), Refused: stats.GetRefused(),
			Finished: stats.GetFinished(), Failed: stats.GetFailed(),
			Cancelled: stats.GetCancelled(), PromptTokens: stats.GetPromptTokens(),
			ReusedTokens: stats.GetReusedTokens(), GeneratedTokens: stats.GetGeneratedTokens(),
			Pauses: stats.GetPauses(), Steps: stats.GetSteps(), MemoryInUse: stats.GetMemoryInUse(),
			MemoryPeak: stats.GetMemoryPeak(), TokensPerSecond: stats.GetTokensPerSecond(),
			PrefixHits: stats.GetPrefixHits(), PrefixBytes: stats.GetPrefixBytes(),
		}
	})
	return s, err
}

// RequestState is where a request stands.
type RequestState int

const (
	RequestWaiting  RequestState = iota // submitted, not admitted yet
	RequestRunning                      // consuming its prompt or generating
	RequestPaused                       // saved to host memory until the memory budget has room
	RequestFinished                     // ended: StopReason says why
)

func (s RequestState) String() string {
	names := [...]string{"waiting", "running", "paused", "finished"}
	if s >= 0 && int(s) < len(names) {
		return names[s]
	}
	return "RequestState(" + strconv.Itoa(int(s)) + ")"
}

// Request is one request of an engine. Its methods may be called from many goroutines at once;
// its tokens are pulled by one at a time.
type Request struct {
	native   native.Request
	listener *requestListener // nil for a request whose tokens are pulled
	closed   atomic.Bool
	doneOnce sync.Once
	done     chan struct{}
}

// run calls f on the request's native part unless the request was closed.
func (r *Request) run(f func(native.Request)) error {
	if r.closed.Load() {
		return ErrClosed
	}
	defer runtime.KeepAlive(r)
	return call(func() { f(r.native) })
}

// Close cancels the request if it has not finished and releases it; calls waiting on it in other
// goroutines return first. Idempotent.
func (r *Request) Close() error {
	if !r.closed.Swap(true) {
		r.native.Close()
		runtime.KeepAlive(r)
	}
	return nil
}

// Cancel asks the request to end (at the engine's next step, StopCancelled); safe from any
// goroutine.
func (r *Request) Cancel() {
	_ = r.run(func(n native.Request) { n.Cancel() })
}

// State is where the request stands now (RequestFinished once closed).
func (r *Request) State() RequestState {
	state := RequestFinished
	_ = r.run(func(n native.Request) { state = RequestState(n.State()) })
	return state
}

// StopReason says why the request ended; StopNone while it has not.
func (r *Request) StopReason() StopReason {
	reason := StopNone
	_ = r.run(func(n native.Request) { reason = StopReason(n.StopReason()) })
	return reason
}

// Err is the *Error that ended the request (StopError), or nil.
func (r *Request) Err() error {
	var err error
	_ = r.run(func(n native.Request) {
		if status := n.ErrorStatus(); status != 0 {
			err = &Error{Status: status, StatusName: n.ErrorStatusName(), Message: n.ErrorMessage()}
		}
	})
	return err
}

// Wait waits until the request has finished, at most timeout (negative: no limit), and reports
// whether it has. Once it has, it returns the error its OnToken returned to stop it (ErrStop
// aside), and re-raises a panic of OnToken.
func (r *Request) Wait(timeout time.Duration) (bool, error) {
	ms := -1
	if timeout >= 0 {
		ms = int(math.Min(math.Ceil(float64(timeout)/float64(time.Millisecond)), math.MaxInt32))
	}
	finished := false
	if err := r.run(func(n native.Request) { finished = n.Wait(ms) }); err != nil || !finished {
		return false, err
	}
	if r.listener == nil {
		return true, nil
	}
	return true, r.listener.result()
}

// Done returns a channel that is closed once the request has finished, or was closed before it
// did, so that a select can wait for it beside other events without a goroutine blocked in Wait.
// StopReason and Wait then tell how it ended. Every call returns the same channel.
func (r *Request) Done() <-chan struct{} {
	r.doneOnce.Do(func() {
		r.done = make(chan struct{})
		listener := &finishListener{done: r.done}
		err := r.run(func(n native.Request) {
			// The native request owns the director from here, also if this fails.
			n.WhenFinished(native.NewDirectorFinishListener(listener))
		})
		if err != nil { // closed: nothing is left to finish
			listener.OnFinish(native.StopReason_CANCELLED)
		}
	})
	return r.done
}

// Tokens returns an iterator over the request's tokens (a request without OnToken), each waited
// for when Next asks for it:
//
//	tokens := request.Tokens()
//	for tokens.Next() {
//		fmt.Print(tokens.Token().Piece)
//	}
//	if err := tokens.Err(); err != nil { ... }
func (r *Request) Tokens() *RequestTokens {
	return &RequestTokens{request: r}
}

// RequestTokens pulls a request's tokens one at a time.
type RequestTokens struct {
	request *Request
	token   Token
	err     error
	done    bool
}

// Next waits for the next token; false once the request has finished and every token was taken,
// or an error occurred (see Err; a request that ended by an error returns it there).
func (it *RequestTokens) Next() bool {
	if it.done {
		return false
	}
	id := -1
	it.err = it.request.run(func(n native.Request) {
		// A failed call's status must be the last one the call reads: no more calls after it.
		if id = n.NextToken(-1); native.LastStatus() == 0 && id >= 0 {
			it.token = Token{ID: int32(id), Piece: n.LastPiece(), Logprob: n.LastLogprob(),
				TopLogprobs: topLogprobs(n.LastTopTokens(), n.LastTopLogprobs)}
		}
	})
	if it.err != nil || id < 0 {
		it.done = true
		return false
	}
	return true
}

// Token is the token the last successful Next produced.
func (it *RequestTokens) Token() Token { return it.token }

// Err is the error that ended the iteration, if any.
func (it *RequestTokens) Err() error { return it.err }

// RequestStats are a request's statistics at one moment; times not reached yet are NaN.
// ReusedTokens are those of a continued state or session, or of a prompt restored from the prefix
// cache (EngineOptions.PrefixCache).
type RequestStats struct {
	PromptTokens, ReusedTokens, GeneratedTokens int64   // prompt consumed, continued, delivered
	Pauses                                      int64   // times paused for the memory budget
	QueueSeconds                                float64 // from submit to admission
	FirstTokenSeconds                           float64 // from submit to the first token
	DecodeSeconds                               float64 // from the first token to the end (or now)
	PausedSeconds                               float64 // time spent paused
}

// Stats returns the request's statistics now.
func (r *Request) Stats() (RequestStats, error) {
	var s RequestStats
	err := r.run(func(n native.Request) {
		stats := n.Stats()
		// The native layer hands back a snapshot whether or not the call failed.
		defer native.DeleteRequestStats(stats)
		if native.LastStatus() != 0 {
			return
		}
		s = RequestStats{
			PromptTokens: stats.GetPromptTokens(), ReusedTokens: stats.GetReusedTokens(),
			GeneratedTokens: stats.GetGeneratedTokens(), Pauses: stats.GetPauses(),
			QueueSeconds: stats.GetQueueSeconds(), FirstTokenSeconds: stats.GetFirstTokenSeconds(),
			DecodeSeconds: stats.GetDecodeSeconds(), PausedSeconds: stats.GetPausedSeconds(),
		}
	})
	return s, err
}

// Save returns the finished request's session state, to continue it later
// (RequestOptions.State, Model.RestoreSession).
func (r *Request) Save() ([]byte, error) {
	var state []byte
	if err := r.run(func(n native.Request) { state = n.Save() }); err != nil {
		return nil, err
	}
	return state, nil
}

// TakeSession returns the finished request's session (the one it continued, or the one it made),
// once.
func (r *Request) TakeSession() (*Session, error) {
	var taken native.Session
	if err := r.run(func(n native.Request) { taken = n.TakeSession() }); err != nil {
		return nil, err
	}
	return newSession(taken), nil
}

// requestListener is the Go side of the SWIG director that receives a request's tokens, on the
// engine's stepping thread.
type requestListener struct {
	onToken    func(Token) error
	director   native.TokenListener // holds the alternatives of the token being delivered
	mutex      sync.Mutex           // guards what follows: Wait reads them on another goroutine
	err        error
	panicked   bool
	panicValue interface{}
}

func (l *requestListener) OnToken(token int, piece string, logprob float32) (keepGoing bool) {
	defer func() {
		if value := recover(); value != nil {
			l.mutex.Lock()
			l.panicked, l.panicValue = true, value
			l.mutex.Unlock()
			keepGoing = false
		}
	}()
	top := topLogprobs(l.director.TopTokens(), l.director.TopLogprobs)
	delivered := Token{ID: int32(token), Piece: piece, Logprob: logprob, TopLogprobs: top}
	if err := l.onToken(delivered); err != nil {
		if !errors.Is(err, ErrStop) {
			l.mutex.Lock()
			l.err = err
			l.mutex.Unlock()
		}
		return false
	}
	return true
}

// finishListener closes Request.Done's channel, on the thread that runs the engine's steps (or on
// the goroutine that asks, for a request finished already).
type finishListener struct {
	done chan struct{}
	once sync.Once
}

func (l *finishListener) OnFinish(native.Photon_bindingStopReason) {
	l.once.Do(func() { close(l.done) })
}

// result re-raises OnToken's panic or returns its error.
func (l *requestListener) result() error {
	l.mutex.Lock()
	defer l.mutex.Unlock()
	if l.panicked {
		panic(l.panicValue)
	}
	return l.err
}

package photon

import (
	"errors"
	"runtime"
	"sort"

	"photon.sdk/photon/internal/native"
)

// SessionOptions are the settings of a session. The zero value holds the defaults: mode Auto,
// the model's context length, f32 KV caches, seed 0, greedy decoding, no top-k / top-p / min-p,
// no repetition / presence / frequency penalty, no logit bias, no alternatives, stop at EOS, no
// stop strings.
type SessionOptions struct {
	Mode              Mode
	ContextLength     int     // tokens the session holds at most; 0: the model's
	KVType            string  // KV cache storage: "f32" (or ""), "bf16" or "f16" (half the memory)
	Seed              uint64  // seed of the sampler's random generator
	Temperature       float32 // 0: greedy (argmax)
	TopK              int     // 0: off
	TopP              float32 // in (0, 1]; 0 or 1: off
	MinP              float32 // in [0, 1); 0: off
	RepetitionPenalty float32 // >= 1; 0 or 1: off
	RepetitionLastN   int     // the window every penalty looks back over, in tokens; 0: 64
	PresencePenalty   float32 // subtracted from the logit of each id in the window; 0: off
	FrequencyPenalty  float32 // subtracted as often as the id occurs there; 0: off
	TopLogprobs       int     // alternatives each token reports (Token.TopLogprobs), <= 20; 0: off
	IgnoreEOS         bool    // do not stop at the end-of-sequence token
	StopStrings       []string
	ContextShift      bool // past a full context, keep its last half and go on
	// LogitBias is added to the logits of its token ids before the penalties; nil: none.
	LogitBias map[int32]float32
}

// build makes the native options; o may be nil.
func (o *SessionOptions) build() (settings native.SessionOptions, err error) {
	if o != nil {
		for _, field := range []struct {
			name  string
			value int
		}{
			{"ContextLength", o.ContextLength}, {"TopK", o.TopK},
			{"RepetitionLastN", o.RepetitionLastN}, {"TopLogprobs", o.TopLogprobs},
		} {
			if err := int32Arg(field.name, field.value); err != nil {
				return nil, err
			}
		}
	}
	err = call(func() {
		settings = native.NewSessionOptions()
		if o == nil || native.LastStatus() != 0 {
			return
		}
		steps := []func(){
			func() { settings.SetMode(native.Photon_bindingMode(o.Mode)) },
			func() { settings.SetContextLength(o.ContextLength) },
			func() {
				if o.KVType != "" {
					settings.SetKvType(o.KVType)
				}
			},
			func() { settings.SetSeed(o.Seed) },
			func() { settings.SetTemperature(o.Temperature) },
			func() { settings.SetTopK(o.TopK) },
			func() {
				if o.TopP != 0 {
					settings.SetTopP(o.TopP)
				}
			},
			func() { settings.SetMinP(o.MinP) },
			func() {
				// The window is the presence and frequency penalties' too: it is set for them
				// without a repetition penalty as well (a penalty of 1 is none).
				if o.RepetitionPenalty != 0 || o.RepetitionLastN != 0 {
					penalty, lastN := o.RepetitionPenalty, o.RepetitionLastN
					if penalty == 0 {
						penalty = 1
					}
					if lastN == 0 {
						lastN = 64
					}
					settings.SetRepetitionPenalty(penalty, lastN)
				}
			},
			func() { settings.SetPresencePenalty(o.PresencePenalty) },
			func() { settings.SetFrequencyPenalty(o.FrequencyPenalty) },
			func() {
				if len(o.LogitBias) > 0 {
					tokens, biases := logitBias(o.LogitBias)
					settings.SetLogitBias(tokens, biases)
				}
			},
			func() { settings.SetTopLogprobs(o.TopLogprobs) },
			func() { settings.SetIgnoreEos(o.IgnoreEOS) },
			func() { settings.SetContextShift(o.ContextShift) },
		}
		for _, stop := range o.StopStrings {
			stop := stop
			steps = append(steps, func() { settings.AddStopString(stop) })
		}
		for _, step := range steps {
			if step(); native.LastStatus() != 0 {
				return
			}
		}
	})
	if err != nil && settings != nil {
		native.DeleteSessionOptions(settings)
	}
	return settings, err
}

// logitBias gives a logit bias map's ids in increasing order and their biases, so that the same
// map always makes the same call (Go iterates a map in a random order).
func logitBias(bias map[int32]float32) (tokens []int32, biases []float32) {
	tokens = make([]int32, 0, len(bias))
	for token := range bias {
		tokens = append(tokens, token)
	}
	sort.Slice(tokens, func(i, j int) bool { return tokens[i] < tokens[j] })
	biases = make([]float32, len(tokens))
	for i, token := range tokens {
		biases[i] = bias[token]
	}
	return tokens, biases
}

// Session is one generation stream over a model.
type Session struct {
	native native.Session // nil once closed
}

func newSession(created native.Session) *Session {
	s := &Session{native: created}
	runtime.SetFinalizer(s, (*Session).Close)
	return s
}

// Close releases the session. Idempotent.
func (s *Session) Close() error {
	if s.native != nil {
		native.DeleteSession(s.native)
		s.native = nil
		runtime.SetFinalizer(s, nil)
	}
	return nil
}

// Mode is the mode the session runs in (Auto resolved).
func (s *Session) Mode() Mode {
	if s.native == nil {
		return ModeAuto
	}
	defer runtime.KeepAlive(s)
	return Mode(s.native.Mode())
}

// KVType is the storage of the session's KV caches: "f32", "bf16" or "f16" (a restored session
// keeps the type its state was saved with).
func (s *Session) KVType() string {
	if s.native == nil {
		return "f32"
	}
	defer runtime.KeepAlive(s)
	return s.native.KvType()
}

// StopReason says why the last generation stopped.
func (s *Session) StopReason() StopReason {
	if s.native == nil {
		return StopNone
	}
	defer runtime.KeepAlive(s)
	return StopReason(s.native.StopReason())
}

// Position is the number of tokens the session holds.
func (s *Session) Position() int {
	if s.native == nil {
		return 0
	}
	defer runtime.KeepAlive(s)
	return s.native.Position()
}

// run calls f on the open native session.
func (s *Session) run(f func(native.Session)) error {
	if s.native == nil {
		return ErrClosed
	}
	defer runtime.KeepAlive(s)
	return call(func() { f(s.native) })
}

// History returns the token ids the session holds: prompt and generated.
func (s *Session) History() ([]int32, error) {
	var ids []int32
	if err := s.run(func(n native.Session) { ids = n.History() }); err != nil {
		return nil, err
	}
	return ids, nil
}

// Prefill consumes token ids (the first prefill normally starts with BOS).
func (s *Session) Prefill(ids []int32) error {
	return s.run(func(n native.Session) { n.PrefillTokens(ids) })
}

// PrefillText tokenizes text (BOS first when the session is empty) and consumes it.
func (s *Session) PrefillText(text string) error {
	return s.run(func(n native.Session) { n.PrefillText(text) })
}

// Cancel asks the session to stop generating: a running Generate at its next token, a Tokens
// iteration at its next Next, even when asked before it (photon_session_cancel in photon.h); safe
// from any goroutine.
func (s *Session) Cancel() {
	if native := s.native; native != nil {
		native.Cancel()
		runtime.KeepAlive(s)
	}
}

// SetSampler replaces the sampler settings (everything but mode, context length and KV type).
func (s *Session) SetSampler(options SessionOptions) error {
	settings, err := options.build()
	if err != nil {
		return err
	}
	defer native.DeleteSessionOptions(settings)
	return s.run(func(n native.Session) { n.SetSampler(settings) })
}

// Save serializes the session's complete state; Model.RestoreSession continues from it.
func (s *Session) Save() ([]byte, error) {
	var state []byte
	if err := s.run(func(n native.Session) { state = n.Save() }); err != nil {
		return nil, err
	}
	return state, nil
}

// SaveFile writes the session's state to a file.
func (s *Session) SaveFile(path string) error {
	return s.run(func(n native.Session) { n.SaveFile(path) })
}

// Generate produces up to maxTokens tokens, passing each to onToken (which may be nil), and
// returns how many were delivered. onToken returns nil to go on, ErrStop to stop, or another error
// to stop and have Generate return it (with the count delivered so far). A panic in onToken stops
// generation and is re-raised here. A failed call returns 0 and the error.
func (s *Session) Generate(maxTokens int, onToken func(Token) error) (int, error) {
	if err := int32Arg("maxTokens", maxTokens); err != nil {
		return 0, err
	}
	generated := 0
	if onToken == nil {
		if err := s.run(func(n native.Session) { generated = n.GenerateQuietly(maxTokens) }); err != nil {
			return 0, err
		}
		return generated, nil
	}
	listener := &tokenListener{onToken: onToken}
	director := native.NewDirectorTokenListener(listener)
	defer native.DeleteDirectorTokenListener(director)
	listener.director = director
	err := s.run(func(n native.Session) { generated = n.GenerateWithListener(maxTokens, director) })
	if listener.panicked {
		panic(listener.panicValue)
	}
	if err != nil {
		return 0, err
	}
	return generated, listener.err
}

// tokenListener is the Go side of the SWIG director that receives generate's tokens.
type tokenListener struct {
	onToken    func(Token) error
	director   native.TokenListener // holds the alternatives of the token being delivered
	err        error
	panicked   bool
	panicValue interface{}
}

func (l *tokenListener) OnToken(token int, piece string, logprob float32) (keepGoing bool) {
	defer func() {
		if value := recover(); value != nil {
			l.panicked, l.panicValue, keepGoing = true, value, false
		}
	}()
	top := topLogprobs(l.director.TopTokens(), l.director.TopLogprobs)
	delivered := Token{ID: int32(token), Piece: piece, Logprob: logprob, TopLogprobs: top}
	if err := l.onToken(delivered); err != nil {
		if !errors.Is(err, ErrStop) {
			l.err = err
		}
		return false
	}
	return true
}

// GenerateBatch advances sessions of one model together, each by up to maxTokens tokens, with
// their matrix products batched; each produces exactly the tokens Generate would have. onToken
// (may be nil) receives each token with its session's index in sessions and returns as for
// Generate, for that session: ErrStop stops it; another error or a panic stops them all and is
// returned or re-raised. The result holds how many tokens each session delivered (nil when the
// call failed).
func GenerateBatch(
	sessions []*Session, maxTokens int, onToken func(int, Token) error,
) ([]int, error) {
	if err := int32Arg("maxTokens", maxTokens); err != nil {
		return nil, err
	}
	vector := native.NewSessionVector()
	defer native.DeleteSessionVector(vector)
	for _, session := range sessions {
		if session.native == nil {
			return nil, ErrClosed
		}
		vector.Add(session.native)
	}
	defer runtime.KeepAlive(sessions)
	var generated []int32
	var callbackErr error
	var err error
	if onToken == nil {
		err = call(func() { generated = native.SessionGenerateBatchQuietly(vector, maxTokens) })
	} else {
		listener := &batchListener{onToken: onToken}
		director := native.NewDirectorBatchListener(listener)
		defer native.DeleteDirectorBatchListener(director)
		listener.director = director
		err = call(func() {
			generated = native.SessionGenerateBatchWithListener(vector, maxTokens, director)
		})
		if listener.panicked {
			panic(listener.panicValue)
		}
		callbackErr = listener.err
	}
	if err != nil {
		return nil, err
	}
	counts := make([]int, len(generated))
	for i, n := range generated {
		counts[i] = int(n)
	}
	return counts, callbackErr
}

// PrefillBatch consumes tokens[i] into sessions[i], for sessions of one model, with the prompts
// of all of them sharing each matrix product; each session ends as Prefill(tokens[i]) would
// leave it. Every session's tokens are checked first: a bad token or a full context returns the
// *Error and leaves all sessions unchanged. sessions and tokens must have the same length.
func PrefillBatch(sessions []*Session, tokens [][]int32) error {
	vector := native.NewSessionVector()
	defer native.DeleteSessionVector(vector)
	for _, session := range sessions {
		if session.native == nil {
			return ErrClosed
		}
		vector.Add(session.native)
	}
	defer runtime.KeepAlive(sessions)
	lists := native.NewTokenIdsVector()
	defer native.DeleteTokenIdsVector(lists)
	for _, ids := range tokens {
		lists.Add(ids)
	}
	return call(func() { native.SessionPrefillBatch(vector, lists) })
}

// batchListener is the Go side of the SWIG director that receives a batch's tokens.
type batchListener struct {
	onToken    func(int, Token) error
	director   native.BatchListener // holds the alternatives of the token being delivered
	err        error
	panicked   bool
	panicValue interface{}
}

func (l *batchListener) OnToken(index int, token int, piece string, logprob float32) (keep bool) {
	if l.err != nil || l.panicked { // one failed: stop the others too
		return false
	}
	defer func() {
		if value := recover(); value != nil {
			l.panicked, l.panicValue, keep = true, value, false
		}
	}()
	top := topLogprobs(l.director.TopTokens(), l.director.TopLogprobs)
	delivered := Token{ID: int32(token), Piece: piece, Logprob: logprob, TopLogprobs: top}
	if err := l.onToken(index, delivered); err != nil {
		if !errors.Is(err, ErrStop) {
			l.err = err
		}
		return false
	}
	return true
}

// Tokens returns an iterator over the next tokens (at most maxTokens), each generated when Next
// asks for it:
//
//	tokens := session.Tokens(64)
//	for tokens.Next() {
//		fmt.Print(tokens.Token().Piece)
//	}
//	if err := tokens.Err(); err != nil { ... }
func (s *Session) Tokens(maxTokens int) *TokenIterator {
	return &TokenIterator{session: s, remaining: maxTokens}
}

// TokenIterator pulls tokens from a session one at a time.
type TokenIterator struct {
	session   *Session
	remaining int
	token     Token
	err       error
}

// Next generates the next token; false once the budget is spent, generation stopped (see
// Session.StopReason) or an error occurred (see Err).
func (it *TokenIterator) Next() bool {
	if it.err != nil || it.remaining <= 0 {
		return false
	}
	id := -1
	it.err = it.session.run(func(n native.Session) {
		// A failed call's status must be the last one the call reads: no more calls after it.
		if id = n.NextToken(); native.LastStatus() == 0 && id >= 0 {
			it.token = Token{ID: int32(id), Piece: n.LastPiece(), Logprob: n.LastLogprob(),
				TopLogprobs: topLogprobs(n.LastTopTokens(), n.LastTopLogprobs)}
		}
	})
	if it.err != nil || id < 0 {
		it.remaining = 0
		return false
	}
	it.remaining--
	return true
}

// Token is the token the last successful Next produced.
func (it *TokenIterator) Token() Token { return it.token }

// Err is the error that ended the iteration, if any.
func (it *TokenIterator) Err() error { return it.err }

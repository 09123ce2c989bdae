// Package photon runs PHOTON language models: load a Model, open Sessions on it, stream tokens
// through a callback (Generate) or an iterator (Tokens), and save / restore session state.
//
// Models and sessions hold native memory: Close releases it at once (a finalizer is the
// fallback). A session keeps its model's native part alive, so the two may be closed in any order.
// A Session must be used by one goroutine at a time, except Cancel.
package photon

import (
	"errors"
	"math"
	"runtime"
	"strconv"

	"photon.sdk/photon/internal/native"
)

// Error is a failed PHOTON call.
type Error struct {
	Status     int    // the photon_status code, e.g. 3 for PHOTON_ERR_IO
	StatusName string // its symbolic name, e.g. "PHOTON_ERR_IO"
	Message    string // the library's message, which names the offending input
}

func (e *Error) Error() string { return e.Message }

// int32Arg checks that an int argument fits the library's 32-bit parameter, which would otherwise
// wrap (1<<32 + 3 read as 3).
func int32Arg(name string, value int) error {
	if value < math.MinInt32 || value > math.MaxInt32 {
		return &Error{
			Status:     1,
			StatusName: "PHOTON_ERR_INVALID_ARGUMENT",
			Message:    "photon: " + name + " = " + strconv.Itoa(value) + " is outside the int32 range",
		}
	}
	return nil
}

// ErrClosed is returned by calls on a closed Model or Session.
var ErrClosed = errors.New("photon: use of a closed model or session")

// ErrStop, returned by a Generate callback, stops generation without an error.
var ErrStop = errors.New("photon: stop generation")

// Mode is how a session decodes (photon_mode).
type Mode int

const (
	ModeAuto    Mode = iota // RecGen for PHOTON with two levels or more, else HierGen
	ModeHierGen             // encoder-consistent decoding, KV caches at every level
	ModeRecGen              // recursive generation, only the top level's KV cache
)

func (m Mode) String() string {
	switch m {
	case ModeAuto:
		return "auto"
	case ModeHierGen:
		return "hiergen"
	case ModeRecGen:
		return "recgen"
	}
	return "Mode(" + strconv.Itoa(int(m)) + ")"
}

// StopReason says why the last generation stopped (photon_stop_reason).
type StopReason int

const (
	StopNone        StopReason = iota // nothing has been generated yet
	StopLength                        // the token budget was reached
	StopEOS                           // the model produced its end-of-sequence token
	StopString                        // the text produced a configured stop string
	StopCallback                      // the callback asked to stop
	StopCancelled                     // Cancel was called
	StopContextFull                   // the session's context is full
	StopError                         // an engine request failed (Request.Err says why)
)

func (r StopReason) String() string {
	names := [...]string{
		"none", "length", "eos", "stop string", "callback", "cancelled", "context full", "error",
	}
	if r >= 0 && int(r) < len(names) {
		return names[r]
	}
	return "StopReason(" + strconv.Itoa(int(r)) + ")"
}

// Token is a generated token: its id, its UTF-8-complete text piece (empty while a character is
// split across tokens), log p(token) under the model's unmodified distribution, and the
// alternatives of its position: the k most likely ids with their log-probabilities, the most
// likely first (SessionOptions.TopLogprobs; nil when it is 0). Model.TokenPiece names them.
type Token struct {
	ID          int32
	Piece       string
	Logprob     float32
	TopLogprobs []TopLogprob
}

// TopLogprob is one alternative of a generated or scored token: a token id and its
// log-probability at the token's position under the model's unmodified distribution.
type TopLogprob struct {
	ID      int32
	Logprob float32
}

// ScoredToken is a token scored with its alternatives (Model.ScoreTop): its id, its teacher-forced
// log p(token | the tokens before it) as Score gives it (NaN for the first token, which is not
// predicted), and the k most likely ids of its position with their log-probabilities, the most
// likely first, the lower id first on ties (nil for the first token). Where the token is among
// them, its value there equals Logprob exactly, so TopLogprobs[0].ID == ID tells whether it was
// the greedy choice.
type ScoredToken struct {
	ID          int32
	Logprob     float32
	TopLogprobs []TopLogprob
}

// topLogprobs pairs a token's alternatives from the native getters of their ids and
// log-probabilities, called on the thread that received the token (logprobs is not called when
// there are none): nil for none.
func topLogprobs(ids []int32, logprobs func() []float32) []TopLogprob {
	if len(ids) == 0 {
		return nil
	}
	values := logprobs()
	top := make([]TopLogprob, len(ids))
	for i, id := range ids {
		top[i] = TopLogprob{ID: id, Logprob: values[i]}
	}
	return top
}

// Version is the native library's version, "MAJOR.MINOR.PATCH".
func Version() string { return native.ModelVersion() }

// call runs f on a locked OS thread and returns the error the native layer recorded there.
func call(f func()) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	f()
	if status := native.LastStatus(); status != 0 {
		return &Error{Status: status, StatusName: native.LastStatusName(), Message: native.LastMessage()}
	}
	return nil
}

// Model is a loaded, immutable model file; safe for concurrent use until Close.
type Model struct {
	native native.Model // nil once closed
}

// Load loads and verifies a .photon model file, to run on the CPU with every core.
func Load(path string) (*Model, error) { return load(path, "cpu", 0, false, "") }

// LoadOn loads and verifies a .photon model file, to run on a device: "cpu", "cuda", "cuda:N" or
// "auto" (a GPU when one is usable, else the CPU). LoadWith also sets the precision.
func LoadOn(path, device string) (*Model, error) { return load(path, device, 0, false, "") }

// LoadWithThreads loads a model that computes on the CPU with at most threads threads per call
// (0: every core). Goroutines that each drive their own sessions can give 1 to use one core each.
func LoadWithThreads(path string, threads int) (*Model, error) {
	return load(path, "cpu", threads, false, "")
}

// LoadOptions are the settings of LoadWith; the zero value holds the defaults.
type LoadOptions struct {
	Device  string // "cpu" (or ""), "cuda", "cuda:N" or "auto"
	Threads int    // the most CPU threads one call computes with; 0: every core
	Verify  bool   // also read every weight, refusing NaN, infinities and changed data
	// Precision is how products of activations and weights compute: "exact", "bf16" or "int8"; ""
	// leaves it to the device ("exact" on the CPU, "bf16" on a GPU).
	Precision string
}

// LoadWith loads and verifies a .photon model file with options.
func LoadWith(path string, options LoadOptions) (*Model, error) {
	device := options.Device
	if device == "" {
		device = "cpu"
	}
	return load(path, device, options.Threads, options.Verify, options.Precision)
}

func load(path, device string, threads int, verify bool, precision string) (*Model, error) {
	if err := int32Arg("threads", threads); err != nil {
		return nil, err
	}
	var loaded native.Model
	if err := call(func() {
		loaded = native.NewModel(path, device, threads, verify, precision)
	}); err != nil {
		return nil, err
	}
	m := &Model{native: loaded}
	runtime.SetFinalizer(m, (*Model).Close)
	return m, nil
}

// Close releases the model (its native part goes once its sessions are closed too). Idempotent.
func (m *Model) Close() error {
	if m.native != nil {
		native.DeleteModel(m.native)
		m.native = nil
		runtime.SetFinalizer(m, nil)
	}
	return nil
}

// modelValue returns get's value, or the zero value once the model is closed.
func modelValue[T any](m *Model, get func(native.Model) T) (value T) {
	if m.native != nil {
		value = get(m.native)
		runtime.KeepAlive(m)
	}
	return value
}

// Device is where the model runs: "cpu" or "cuda:N".
func (m *Model) Device() string { return modelValue(m, native.Model.Device) }

// Precision is how the model's products compute: "exact", "bf16" or "int8".
func (m *Model) Precision() string { return modelValue(m, native.Model.Precision) }

// Arch is "photon" or "vanilla".
func (m *Model) Arch() string { return modelValue(m, native.Model.Arch) }

// Levels is the number of PHOTON levels (0 for vanilla).
func (m *Model) Levels() int { return modelValue(m, native.Model.Levels) }

// ParameterCount is the exact number of parameters.
func (m *Model) ParameterCount() uint64 { return modelValue(m, native.Model.ParameterCount) }

// VocabSize is the vocabulary size.
func (m *Model) VocabSize() int { return modelValue(m, native.Model.VocabSize) }

// ContextLength is the longest token sequence the model was configured for.
func (m *Model) ContextLength() int { return modelValue(m, native.Model.ContextLength) }

// BOS is the id of the beginning-of-sequence token, -1 if none.
func (m *Model) BOS() int { return modelValue(m, native.Model.Bos) }

// EOS is the id of the end-of-sequence token, -1 if none.
func (m *Model) EOS() int { return modelValue(m, native.Model.Eos) }

// ConfigJSON is the model's configuration as JSON.
func (m *Model) ConfigJSON() string { return modelValue(m, native.Model.ConfigJson) }

// Tokenize splits UTF-8 text into token ids, with BOS first when addBOS is set.
func (m *Model) Tokenize(text string, addBOS bool) ([]int32, error) {
	if m.native == nil {
		return nil, ErrClosed
	}
	defer runtime.KeepAlive(m)
	var ids []int32
	if err := call(func() { ids = m.native.Tokenize(text, addBOS) }); err != nil {
		return nil, err
	}
	return ids, nil
}

// Detokenize turns token ids back into text.
func (m *Model) Detokenize(ids []int32) (string, error) {
	if m.native == nil {
		return "", ErrClosed
	}
	defer runtime.KeepAlive(m)
	var text string
	if err := call(func() { text = m.native.Detokenize(ids) }); err != nil {
		return "", err
	}
	return text, nil
}

// TokenPiece returns the raw bytes token adds to generated text after the token previous (-1, or
// a token without text such as BOS: at the start of the text, where a leading space is dropped):
// a piece before a character split across tokens is put together, so it may hold part of a UTF-8
// character. For naming the alternatives of Token.TopLogprobs.
func (m *Model) TokenPiece(token, previous int32) ([]byte, error) {
	if m.native == nil {
		return nil, ErrClosed
	}
	defer runtime.KeepAlive(m)
	var piece []byte
	if err := call(func() { piece = m.native.TokenPiece(int(token), int(previous)) }); err != nil {
		return nil, err
	}
	return piece, nil
}

// Score returns teacher-forced log-probabilities: element i is log p(ids[i] | ids[:i]); element 0
// is NaN (the first token, normally BOS, is not predicted). A sequence longer than the context is
// scored in sliding windows half a context apart.
func (m *Model) Score(ids []int32) ([]float32, error) {
	if m.native == nil {
		return nil, ErrClosed
	}
	defer runtime.KeepAlive(m)
	var logprobs []float32
	if err := call(func() { logprobs = m.native.Score(ids) }); err != nil {
		return nil, err
	}
	return logprobs, nil
}

// ScoreWithStride is Score with the sliding windows of a sequence longer than the context stride
// tokens apart (1 <= stride < the context; 0: half the context).
func (m *Model) ScoreWithStride(ids []int32, stride int) ([]float32, error) {
	if m.native == nil {
		return nil, ErrClosed
	}
	if err := int32Arg("stride", stride); err != nil {
		return nil, err
	}
	defer runtime.KeepAlive(m)
	var logprobs []float32
	if err := call(func() { logprobs = m.native.ScoreWithStride(ids, stride) }); err != nil {
		return nil, err
	}
	return logprobs, nil
}

// ScoreTop is Score with alternatives: a ScoredToken per id, with the log-probability Score gives
// it and its position's k most likely ids and their log-probabilities (1 <= k <= the vocabulary;
// the first token has none). A sequence longer than the context is scored in sliding windows half
// a context apart.
func (m *Model) ScoreTop(ids []int32, k int) ([]ScoredToken, error) {
	return m.scoreTop(k, func() native.TopScores { return m.native.ScoreTop(ids, k) })
}

// ScoreTopWithStride is ScoreTop with the sliding windows of a sequence longer than the context
// stride tokens apart (1 <= stride < the context; 0: half the context).
func (m *Model) ScoreTopWithStride(ids []int32, k, stride int) ([]ScoredToken, error) {
	if err := int32Arg("stride", stride); err != nil {
		return nil, err
	}
	return m.scoreTop(k, func() native.TopScores {
		return m.native.ScoreTopWithStride(ids, k, stride)
	})
}

// scoreTop runs score, which returns the native result (made also when the call failed), and
// gives its rows of k alternatives as ScoredTokens.
func (m *Model) scoreTop(k int, score func() native.TopScores) ([]ScoredToken, error) {
	if m.native == nil {
		return nil, ErrClosed
	}
	if err := int32Arg("k", k); err != nil {
		return nil, err
	}
	defer runtime.KeepAlive(m)
	var scores native.TopScores
	err := call(func() { scores = score() })
	if scores != nil {
		defer native.DeleteTopScores(scores)
	}
	if err != nil {
		return nil, err
	}
	ids, logprobs := scores.Tokens(), scores.Logprobs()
	topIDs, topLogprobs := scores.TopTokens(), scores.TopLogprobs()
	scored := make([]ScoredToken, len(ids))
	for i, id := range ids {
		scored[i] = ScoredToken{ID: id, Logprob: logprobs[i]}
		if i == 0 {
			continue // the first token is not predicted: no alternatives
		}
		row := make([]TopLogprob, k)
		for j := range row {
			row[j] = TopLogprob{ID: topIDs[i*k+j], Logprob: topLogprobs[i*k+j]}
		}
		scored[i].TopLogprobs = row
	}
	return scored, nil
}

// TokenizerModel is the model's embedded tokenizer: a sentencepiece .model file's bytes.
func (m *Model) TokenizerModel() ([]byte, error) {
	if m.native == nil {
		return nil, ErrClosed
	}
	defer runtime.KeepAlive(m)
	var bytes []byte
	if err := call(func() { bytes = m.native.TokenizerModel() }); err != nil {
		return nil, err
	}
	return bytes, nil
}

// NewSession opens a generation session; options may be nil for the defaults.
func (m *Model) NewSession(options *SessionOptions) (*Session, error) {
	if m.native == nil {
		return nil, ErrClosed
	}
	defer runtime.KeepAlive(m)
	settings, err := options.build()
	if err != nil {
		return nil, err
	}
	defer native.DeleteSessionOptions(settings)
	var created native.Session
	if err := call(func() { created = native.NewSession(m.native, settings) }); err != nil {
		return nil, err
	}
	return newSession(created), nil
}

// RestoreSession creates a session from the bytes of Session.Save (made by any PHOTON binding).
func (m *Model) RestoreSession(state []byte) (*Session, error) {
	return m.restore(func() native.Session { return native.SessionRestore(m.native, state) })
}

// RestoreSessionFile creates a session from a file written by Session.SaveFile.
func (m *Model) RestoreSessionFile(path string) (*Session, error) {
	return m.restore(func() native.Session { return native.SessionRestoreFile(m.native, path) })
}

func (m *Model) restore(restore func() native.Session) (*Session, error) {
	if m.native == nil {
		return nil, ErrClosed
	}
	defer runtime.KeepAlive(m)
	var restored native.Session
	if err := call(func() { restored = restore() }); err != nil {
		return nil, err
	}
	return newSession(restored), nil
}

// Command serve serves three completions of one prompt at once with a PHOTON engine: one pulled
// by this goroutine, one by another goroutine, one pushed to a callback on the engine's own
// thread.
//
//	PKG_CONFIG_PATH=P/lib/pkgconfig CGO_LDFLAGS=-Wl,-rpath,P/lib go build -o serve .
//	./serve [MODEL] [PROMPT] [N]
//
// where P is where the SDK is installed (README.md: Installing); the build makes this program as
// build/bindings/go/serve. MODEL defaults to the shipped models/photon-kjv.photon, PROMPT to
// "In the beginning", N (tokens per request) to 32.
package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"

	"photon.sdk/photon"
)

func main() {
	path, prompt, n := "models/photon-kjv.photon", "In the beginning", 32
	if len(os.Args) > 1 {
		path = os.Args[1]
	}
	if len(os.Args) > 2 {
		prompt = os.Args[2]
	}
	if len(os.Args) > 3 {
		var err error
		if n, err = strconv.Atoi(os.Args[3]); err != nil {
			fmt.Fprintln(os.Stderr, "serve: N must be an integer:", err)
			os.Exit(2)
		}
	}
	if err := run(path, prompt, n); err != nil {
		fmt.Fprintln(os.Stderr, "serve:", err)
		os.Exit(1)
	}
}

func run(path, prompt string, n int) error {
	model, err := photon.Load(path)
	if err != nil {
		return err
	}
	defer model.Close()
	engine, err := model.NewEngine(&photon.EngineOptions{MaxRunning: 4})
	if err != nil {
		return err
	}
	defer engine.Close()
	if err := engine.Start(); err != nil { // its worker thread runs the steps
		return err
	}
	ask := func(seed uint64) photon.RequestOptions {
		sampler := photon.SessionOptions{Temperature: 0.8, Seed: seed}
		return photon.RequestOptions{PromptText: prompt, Options: &sampler, MaxTokens: n}
	}
	streamed, err := engine.Submit(ask(1))
	if err != nil {
		return err
	}
	defer streamed.Close()
	other, err := engine.Submit(ask(2))
	if err != nil {
		return err
	}
	defer other.Close()
	var pushed strings.Builder
	var pushedMutex sync.Mutex
	third := ask(3)
	third.OnToken = func(token photon.Token) error { // on the engine's thread
		pushedMutex.Lock()
		defer pushedMutex.Unlock()
		pushed.WriteString(token.Piece)
		return nil // photon.ErrStop would stop this request
	}
	called, err := engine.Submit(third)
	if err != nil {
		return err
	}
	defer called.Close()

	pulled := make(chan string)
	go func() {
		var text strings.Builder
		for tokens := other.Tokens(); tokens.Next(); {
			text.WriteString(tokens.Token().Piece)
		}
		pulled <- text.String()
	}()
	fmt.Print(prompt)
	tokens := streamed.Tokens()
	for tokens.Next() {
		fmt.Print(tokens.Token().Piece)
	}
	if err := tokens.Err(); err != nil {
		return err
	}
	fmt.Println()
	fmt.Println(prompt + <-pulled)
	if _, err := called.Wait(-1); err != nil { // an error returned by the callback
		return err
	}
	pushedMutex.Lock()
	fmt.Println(prompt + pushed.String())
	pushedMutex.Unlock()
	if err := engine.Stop(true); err != nil {
		return err
	}
	stats, err := engine.Stats()
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "[3 requests, %d tokens, %d steps]\n", stats.GeneratedTokens, stats.Steps)
	return nil
}

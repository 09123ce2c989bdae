// Command stream loads a PHOTON model, streams a completion through a callback and through an
// iterator, saves the session, restores it and continues.
//
//	PKG_CONFIG_PATH=P/lib/pkgconfig CGO_LDFLAGS=-Wl,-rpath,P/lib go build -o stream .
//	./stream [MODEL] [PROMPT] [N]
//
// where P is where the SDK is installed (README.md: Installing); the build makes this program as
// build/bindings/go/stream. MODEL defaults to the shipped models/photon-kjv.photon, PROMPT to
// "In the beginning", N (tokens per step) to 16.
package main

import (
	"fmt"
	"os"
	"strconv"

	"photon.sdk/photon"
)

func main() {
	path, prompt, n := "models/photon-kjv.photon", "In the beginning", 16
	if len(os.Args) > 1 {
		path = os.Args[1]
	}
	if len(os.Args) > 2 {
		prompt = os.Args[2]
	}
	if len(os.Args) > 3 {
		var err error
		if n, err = strconv.Atoi(os.Args[3]); err != nil {
			fmt.Fprintln(os.Stderr, "stream: N must be an integer:", err)
			os.Exit(2)
		}
	}
	if err := run(path, prompt, n); err != nil {
		fmt.Fprintln(os.Stderr, "stream:", err)
		os.Exit(1)
	}
}

func run(path, prompt string, n int) error {
	model, err := photon.Load(path)
	if err != nil {
		return err
	}
	defer model.Close()
	session, err := model.NewSession(&photon.SessionOptions{Temperature: 0.8, Seed: 42})
	if err != nil {
		return err
	}
	defer session.Close()
	if err := session.PrefillText(prompt); err != nil {
		return err
	}
	fmt.Print(prompt)

	// 1. A callback receives each token as it is generated; returning photon.ErrStop would stop.
	if _, err := session.Generate(n, func(token photon.Token) error {
		fmt.Print(token.Piece)
		return nil
	}); err != nil {
		return err
	}

	// 2. An iterator pulls one token at a time.
	tokens := session.Tokens(n)
	for tokens.Next() {
		fmt.Print(tokens.Token().Piece)
	}
	if err := tokens.Err(); err != nil {
		return err
	}

	// 3. Save the session, restore the state into a new session and continue there.
	state, err := session.Save()
	if err != nil {
		return err
	}
	restored, err := model.RestoreSession(state)
	if err != nil {
		return err
	}
	defer restored.Close()
	for tokens = restored.Tokens(n); tokens.Next(); {
		fmt.Print(tokens.Token().Piece)
	}
	if err := tokens.Err(); err != nil {
		return err
	}
	fmt.Println()
	fmt.Fprintf(os.Stderr, "[%d tokens, %s, state %d bytes]\n", restored.Position(), restored.Mode(),
		len(state))
	return nil
}

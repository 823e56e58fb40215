// Package tasks runs work in the background as MCP tasks: a client gets a
// task at once, polls it for its status and result, answers the questions
// it asks (such as an approval), and may cancel it.
//
// Store is the contract the protocol adapters in package server use (MCP
// 2025-11-25 tasks through mcp-go, and the 2026-07-28 extension
// io.modelcontextprotocol/tasks by hand); Memory is the in-process
// implementation. A task's work runs with a context of its own: it survives
// the request that created it and the client that went away, and ends when
// the task is cancelled, at the store's maximum run time, or at Close.
package tasks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Status is a task's state, with the values of the MCP specification.
type Status string

// The statuses. Completed, Failed and Cancelled are terminal.
const (
	StatusWorking       Status = "working"
	StatusInputRequired Status = "input_required"
	StatusCompleted     Status = "completed"
	StatusFailed        Status = "failed"
	StatusCancelled     Status = "cancelled"
)

// Statuses lists every status.
var Statuses = []Status{StatusWorking, StatusInputRequired, StatusCompleted, StatusFailed, StatusCancelled}

// Terminal reports whether s is final.
func (s Status) Terminal() bool {
	return s == StatusCompleted || s == StatusFailed || s == StatusCancelled
}

// Task is a snapshot of one task.
type Task struct {
	ID            string
	Status        Status
	StatusMessage string
	CreatedAt     time.Time
	UpdatedAt     time.Time
	// TTL is how long after CreatedAt the task may be discarded; it grows
	// while the task works and is fixed once it ends.
	TTL time.Duration
	// PollInterval is how often a client should poll.
	PollInterval time.Duration
	// Result is what the work returned, once Completed.
	Result any
	// Err is the work's error, once Failed.
	Err error
	// InputRequests are the open questions while InputRequired, by key.
	InputRequests map[string]any
}

// Func is the work of a task. ctx is the task's own; in asks the client
// questions. A nil error completes the task with the result; an error fails
// it, unless the task was cancelled.
type Func func(ctx context.Context, in Input) (any, error)

// Input lets a task's work ask the client for input while it runs.
type Input interface {
	// Ask publishes requests (by key; each key may be used once in a
	// task's life), puts the task in input_required and waits until every
	// key has an answer (see Store.Update) or ctx ends. The task is
	// working again when Ask returns.
	Ask(ctx context.Context, requests map[string]any) (map[string]json.RawMessage, error)
	// TaskID returns the task's id.
	TaskID() string
}

// Store holds tasks. Every method is safe for concurrent use. owner scopes
// a task to whoever created it: a task is found only by the owner that
// created it ("" is an owner like any other), and the store's caps per
// client count the tasks of each owner (an MCP client today, a principal
// once they exist).
type Store interface {
	// Create starts fn in the background and returns the new task, in
	// status working. keep, if positive, asks to keep the task's result
	// for that long after it ends (capped by the store). bytes is what
	// the task holds in memory until fn returns (its arguments), counted
	// against the store's byte caps. A cap refuses with a *LimitError.
	Create(owner string, keep time.Duration, bytes int64, fn Func) (Task, error)
	// Get returns the task, or ErrNotFound.
	Get(owner, id string) (Task, error)
	// Update gives answers to the task's open input requests; answers to
	// keys that are not open are ignored. ErrNotFound, or ErrTerminal when
	// the task has ended.
	Update(owner, id string, answers map[string]json.RawMessage) error
	// Cancel stops the task's work, waits (briefly) for it to have
	// stopped, and returns the task, cancelled. ErrNotFound, or
	// ErrTerminal (with the task) when it had already ended.
	Cancel(owner, id string) (Task, error)
	// Wait returns the task once it has ended, or ctx's error.
	Wait(ctx context.Context, owner, id string) (Task, error)
	// Close cancels every task that works and waits for them. It is safe
	// to call more than once; Create fails with ErrClosed afterwards.
	Close() error
}

// Cap names one of a store's caps.
type Cap string

// The caps of a store.
const (
	// CapTasks: tasks held, ended ones included, all owners together.
	CapTasks Cap = "tasks"
	// CapClientTasks: tasks of one owner that have not ended (queued,
	// running, waiting for input, or cancelled and still stopping).
	CapClientTasks Cap = "client_tasks"
	// CapBytes: bytes held by tasks that have not ended, all owners.
	CapBytes Cap = "bytes"
	// CapClientBytes: bytes held by one owner's tasks that have not ended.
	CapClientBytes Cap = "client_bytes"
)

// LimitError is a Create that a cap refused. It wraps ErrTooMany.
type LimitError struct {
	Cap Cap
	// Held is what the cap counts now, Adding what the task would add
	// (1 task, or its bytes), Max the cap.
	Held, Adding, Max int64
}

func (e *LimitError) Error() string {
	switch e.Cap {
	case CapClientTasks:
		return fmt.Sprintf("%v: this client has %d tasks that have not ended, the most one client may have", ErrTooMany, e.Held)
	case CapBytes:
		return fmt.Sprintf("%v: the tasks that have not ended hold %d bytes of arguments, and %d more would pass the server's cap of %d", ErrTooMany, e.Held, e.Adding, e.Max)
	case CapClientBytes:
		return fmt.Sprintf("%v: this client's tasks that have not ended hold %d bytes of arguments, and %d more would pass the cap of %d per client", ErrTooMany, e.Held, e.Adding, e.Max)
	}
	return fmt.Sprintf("%v: %d are held, none of them ended", ErrTooMany, e.Held)
}

func (e *LimitError) Unwrap() error { return ErrTooMany }

// Errors of a Store.
var (
	ErrNotFound = errors.New("task not found")
	ErrTerminal = errors.New("task already ended")
	ErrTooMany  = errors.New("too many tasks")
	ErrClosed   = errors.New("task store closed")
	// ErrMaxRunTime is the error of a task stopped at the store's maximum
	// run time.
	ErrMaxRunTime = errors.New("task ran past its maximum run time")
)

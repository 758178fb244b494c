package tunnel

import "context"

// A run's names asked for with its hello (ClientConfig.Asks): the agent
// answers each with a served message or a refused event naming it, with
// no reply of a forward request to wait for.

// askedForward is a forward asked for with the hello of cc, until Serve
// takes its answer.
type askedForward struct {
	cc     *clientConn
	answer chan serveOutcome
	done   func() // takes answer out of cc's waiters
}

// ask makes asks wait for their answers on cc, before the hello asking
// for them is sent.
func (cc *clientConn) ask(asks []*forward) {
	s := cc.s
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range asks {
		answer, done := awaitAnswer(&cc.mu, cc.waiters, f.name)
		f.asked = &askedForward{cc: cc, answer: answer, done: done}
	}
}

// unask takes asks, which the agent was not asked for after all, out of
// the session: Serve of them asks for them as for any other name.
func (cc *clientConn) unask(asks []*forward) {
	for _, f := range asks {
		cc.s.mu.Lock()
		a := f.asked
		f.asked = nil
		cc.s.mu.Unlock()
		if a != nil {
			a.done()
		}
		cc.s.dropForward(f)
	}
}

// awaitAsked returns the agent's answer a to f, which the hello asked for.
// If the connection is lost first, f is asked for on the next one; if ctx
// ends first, f is given back should the agent serve it after all.
func (s *Session) awaitAsked(ctx context.Context, f *forward, a *askedForward) (Served, error) {
	take := func(o serveOutcome) (Served, error) {
		a.done()
		served, err := o.result(f)
		if err != nil {
			s.dropForward(f)
			return Served{}, err
		}
		s.mu.Lock()
		f.established = true
		s.mu.Unlock()
		return served, nil
	}
	select {
	case o := <-a.answer:
		return take(o)
	case <-a.cc.gone:
		select {
		case o := <-a.answer: // read before the connection was gone
			return take(o)
		default:
		}
		a.done()
		return s.requestAgain(ctx, f)
	case <-ctx.Done():
		s.dropForward(f)
		go func() {
			defer a.done()
			select {
			case o := <-a.answer:
				if o.refusal == "" {
					a.cc.cancelForward(f)
				}
			case <-a.cc.gone:
			}
		}()
		return Served{}, ctx.Err()
	}
}

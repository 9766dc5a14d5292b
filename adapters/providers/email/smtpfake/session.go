package smtpfake

import (
	"crypto/subtle"
	"errors"
	"io"
	"slices"
	"strconv"

	"github.com/emersion/go-sasl"
	"github.com/emersion/go-smtp"
)

// errDropped ends a transaction whose connection the fake dropped: go-smtp's reply to it
// cannot reach the client.
var errDropped = errors.New("smtpfake dropped the connection")

// backend makes a session per EHLO (go-smtp makes a new one after STARTTLS too).
type backend struct{ srv *Server }

// NewSession starts a session and tells the connection about it, so that the connection can
// answer DATA for it (StageData).
func (b backend) NewSession(c *smtp.Conn) (smtp.Session, error) {
	s := &session{srv: b.srv, fc: fakeConnOf(c.Conn())}
	_, s.tls = c.TLSConnectionState()
	if b.srv.cfg.ImplicitTLS {
		s.tls = true // under go-smtp, which therefore does not know
	}
	if s.fc != nil {
		s.fc.setSession(s)
	}
	return s, nil
}

// session is one client's session. go-smtp calls it from the connection's one goroutine, the
// same that reads and writes the connection, so its fields need no lock.
type session struct {
	srv  *Server
	fc   *fakeConn
	tls  bool
	user string // authenticated as

	from string
	to   []string
	fate Behaviour // drawn at MAIL FROM for the whole transaction
}

var (
	_ smtp.Session     = (*session)(nil)
	_ smtp.AuthSession = (*session)(nil)
)

// AuthMechanisms offers PLAIN when the fake has an account.
func (s *session) AuthMechanisms() []string {
	if s.srv.cfg.Username == "" {
		return nil
	}
	return []string{sasl.Plain}
}

// Auth checks PLAIN credentials against the one account. A refusal is 535 5.7.8, what real
// servers answer; the password is never printed.
func (s *session) Auth(mech string) (sasl.Server, error) {
	if mech != sasl.Plain || s.srv.cfg.Username == "" {
		return nil, smtp.ErrAuthUnknownMechanism
	}
	return sasl.NewPlainServer(func(identity, username, password string) error {
		userOK := subtle.ConstantTimeCompare([]byte(username), []byte(s.srv.cfg.Username)) == 1
		passOK := subtle.ConstantTimeCompare([]byte(password), []byte(s.srv.cfg.Password)) == 1
		if !userOK || !passOK || (identity != "" && identity != username) {
			s.srv.say("answered AUTH PLAIN for %q with 535 5.7.8 (wrong user name or password)", username)
			return smtp.ErrAuthFailed
		}
		s.user = username
		return nil
	}), nil
}

// Mail starts a transaction and draws its fate.
func (s *session) Mail(from string, _ *smtp.MailOptions) error {
	s.srv.count(&s.srv.counts.Mail)
	if s.srv.cfg.RequireAuth && s.user == "" {
		s.srv.say("answered MAIL FROM:<%s> with 530 5.7.0 (authentication required)", from)
		return &smtp.SMTPError{Code: 530, EnhancedCode: smtp.EnhancedCode{5, 7, 0}, Message: "Authentication required"}
	}
	s.from, s.to = from, nil
	s.fate = s.srv.draw()
	if s.fate.FailAt == StageMail {
		return s.fail("MAIL FROM:<" + from + ">")
	}
	return nil
}

// Rcpt adds a recipient, unless the fate says to fail here.
func (s *session) Rcpt(to string, _ *smtp.RcptOptions) error {
	s.srv.count(&s.srv.counts.Rcpt)
	if s.fate.FailAt == StageRcpt {
		return s.fail("RCPT TO:<" + to + ">")
	}
	s.to = append(s.to, to)
	return nil
}

// answerData is asked by the connection when the client sends DATA: the reply line to write
// instead of letting go-smtp answer 354, if the fate says to fail here.
func (s *session) answerData() (string, bool) {
	if s.fate.FailAt != StageData {
		return "", false // go-smtp answers it, and Data counts it
	}
	s.srv.count(&s.srv.counts.Data)
	_ = s.fail("DATA")
	return s.fate.reply() + "\r\n", true
}

// Data reads the message and answers its end as the fate says.
func (s *session) Data(r io.Reader) error {
	s.srv.count(&s.srv.counts.Data)
	b := s.fate
	if b.DropDuringData {
		n, _ := io.CopyN(io.Discard, r, dropDuringDataBytes)
		s.srv.say("reset the connection after %d bytes of the message from <%s> (drop-during-data)", n, s.from)
		s.fc.drop(true)
		return errDropped
	}
	data, err := io.ReadAll(r)
	if err != nil {
		return err // go-smtp answers it (552 for a message too large)
	}
	m := Message{From: s.from, To: slices.Clone(s.to), Data: data, TLS: s.tls, Auth: s.user}
	wait := func() bool {
		if b.Delay == 0 {
			return true
		}
		s.srv.say("delaying the reply to the end of the message from <%s> by %s", s.from, b.Delay)
		return s.srv.wait(b.Delay)
	}
	switch {
	case b.FailAt == StageData || b.FailAt == StageDataEnd:
		if b.FailAt == StageData {
			// Only inside STARTTLS does DATA get here (the connection answers it otherwise).
			s.srv.say("could not answer DATA inside TLS; answering the end of the message instead")
		}
		err := s.fail("the end of the message from <" + s.from + ">")
		m.Reply = b.reply()
		s.srv.record(m, false)
		if !wait() {
			return errDropped
		}
		return err
	case b.DropAfterData:
		s.srv.record(m, false)
		s.srv.say("read the whole message from <%s> (%d bytes), then dropped the connection without a reply (drop-after-data)", s.from, len(data))
		if wait() {
			s.fc.drop(false)
		}
		return errDropped
	default:
		m = s.srv.record(m, true)
		s.srv.say("queued %s from <%s> to %v message-id=%s subject=%s bytes=%d tls=%t auth=%q",
			m.QueueID, m.From, m.To, m.MessageID(), strconv.Quote(m.Subject()), len(m.Data), m.TLS, m.Auth)
		if !wait() {
			return errDropped
		}
		// A 250 "error" is how a go-smtp backend chooses its success text (conn.go,
		// dataErrorToStatus): real servers name the queue id there, and clients record it.
		return &smtp.SMTPError{Code: 250, EnhancedCode: smtp.EnhancedCode{2, 0, 0}, Message: queuedText(m.QueueID)}
	}
}

// fail reports a failure the fate answers with at what, and returns it as go-smtp sends it.
func (s *session) fail(what string) error {
	b := s.fate
	s.srv.say("answered %s with %s (%s)", what, b.codes(), b)
	return &smtp.SMTPError{Code: b.Code, EnhancedCode: b.enhanced(), Message: b.text()}
}

// Reset ends the transaction (RSET, a new EHLO, or the end of DATA).
func (s *session) Reset() {
	s.from, s.to, s.fate = "", nil, Behaviour{}
}

// Logout ends the session.
func (s *session) Logout() error { return nil }

package smtpfake

import (
	"crypto/x509"
	"errors"
	"net"
	"net/smtp"
	"net/textproto"
	"strings"
	"sync"
	"testing"
	"time"
)

// lines collects the fake's Out lines.
type lines struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lines) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func start(t *testing.T, cfg Config) *Server {
	t.Helper()
	cfg.Addr = "127.0.0.1:0"
	s, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

const message = "From: a@example.com\r\nTo: b@example.org\r\nSubject: =?utf-8?q?caf=C3=A9?=\r\nMessage-ID: <1@example.com>\r\n\r\n.leading dot\r\nbody\r\n"

// TestRecords: a message sent with the standard library's client is kept as sent, dot-stuffing
// undone, with its queue id, and printed.
func TestRecords(t *testing.T) {
	t.Parallel()
	var out lines
	s := start(t, Config{Out: &out})
	if err := smtp.SendMail(s.Addr(), nil, "a@example.com", []string{"b@example.org", "c@example.org"}, []byte(message)); err != nil {
		t.Fatal(err)
	}
	msgs := s.Messages()
	if len(msgs) != 1 {
		t.Fatalf("%d messages, want 1", len(msgs))
	}
	m := msgs[0]
	if m.From != "a@example.com" || strings.Join(m.To, " ") != "b@example.org c@example.org" || string(m.Data) != message {
		t.Errorf("message = %s -> %v %q", m.From, m.To, m.Data)
	}
	if m.QueueID != "00001" || m.Reply != "250 2.0.0 OK: queued as 00001" || m.TLS || m.Auth != "" {
		t.Errorf("queue id %q, reply %q, tls %t, auth %q", m.QueueID, m.Reply, m.TLS, m.Auth)
	}
	if m.MessageID() != "<1@example.com>" || m.Subject() != "café" {
		t.Errorf("Message-ID %q, Subject %q", m.MessageID(), m.Subject())
	}
	if got := out.String(); !strings.Contains(got, "smtpfake: queued 00001 from <a@example.com>") || strings.Count(got, "\n") != 1 {
		t.Errorf("Out = %q, want one line for the message", got)
	}
}

// TestTimes: fail=rcpt:451,times=1 refuses the first message only; SetBehaviour restarts the
// count.
func TestTimes(t *testing.T) {
	t.Parallel()
	var out lines
	b, err := ParseBehaviour("fail=rcpt:451:4.7.1,times=1")
	if err != nil {
		t.Fatal(err)
	}
	s := start(t, Config{Out: &out, Behaviour: b})
	send := func() error {
		return smtp.SendMail(s.Addr(), nil, "a@example.com", []string{"b@example.org"}, []byte(message))
	}
	var reply *textproto.Error
	if err := send(); !errors.As(err, &reply) || reply.Code != 451 || !strings.HasPrefix(reply.Msg, "4.7.1 ") {
		t.Fatalf("first send: %v, want 451 4.7.1", err)
	}
	if !strings.Contains(out.String(), "answered RCPT TO:<b@example.org> with 451 4.7.1") {
		t.Errorf("Out = %q, want the failure", out.String())
	}
	if err := send(); err != nil {
		t.Fatalf("second send: %v, want accepted", err)
	}
	s.SetBehaviour(b)
	if err := send(); !errors.As(err, &reply) || reply.Code != 451 {
		t.Fatalf("after SetBehaviour: %v, want 451 again", err)
	}
	if n := len(s.Messages()); n != 1 {
		t.Errorf("%d messages, want 1", n)
	}
}

// TestFailsDATA: fail=data answers the DATA command itself (go-smtp alone would say 354), and
// the session goes on.
func TestFailsDATA(t *testing.T) {
	t.Parallel()
	s := start(t, Config{Behaviour: Behaviour{FailAt: StageData, Code: 452, EnhancedCode: "4.3.1", Text: "Disk full"}})
	c, err := smtp.Dial(s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Mail("a@example.com"); err != nil {
		t.Fatal(err)
	}
	if err := c.Rcpt("b@example.org"); err != nil {
		t.Fatal(err)
	}
	_, err = c.Data()
	var reply *textproto.Error
	if !errors.As(err, &reply) || reply.Code != 452 || reply.Msg != "4.3.1 Disk full" {
		t.Fatalf("DATA: %v, want 452 4.3.1 Disk full", err)
	}
	if err := c.Noop(); err != nil {
		t.Errorf("NOOP after the refused DATA: %v", err)
	}
	if err := c.Quit(); err != nil {
		t.Errorf("QUIT: %v", err)
	}
	if n := len(s.Messages()); n != 0 {
		t.Errorf("%d messages, want 0", n)
	}
}

// TestFailsWithoutEnhancedCode: NoEnhancedCode answers with the reply code and text alone, at
// RCPT TO and at the end of data (where the kept message records the reply so).
func TestFailsWithoutEnhancedCode(t *testing.T) {
	t.Parallel()
	for _, stage := range []Stage{StageRcpt, StageDataEnd} {
		s := start(t, Config{Behaviour: Behaviour{FailAt: stage, Code: 550, EnhancedCode: NoEnhancedCode, Text: "User unknown"}})
		err := smtp.SendMail(s.Addr(), nil, "a@example.com", []string{"b@example.org"}, []byte(message))
		var reply *textproto.Error
		if !errors.As(err, &reply) || reply.Code != 550 || reply.Msg != "User unknown" {
			t.Fatalf("%s: %v, want 550 User unknown without an enhanced code", stage, err)
		}
		if msgs := s.Messages(); stage == StageDataEnd && (len(msgs) != 1 || msgs[0].Reply != "550 User unknown") {
			t.Errorf("%s: messages %+v, want the one answered 550 User unknown", stage, msgs)
		}
	}
}

// TestDropAfterData: the whole message is read and kept, and no reply comes.
func TestDropAfterData(t *testing.T) {
	t.Parallel()
	s := start(t, Config{Behaviour: Behaviour{DropAfterData: true}})
	err := smtp.SendMail(s.Addr(), nil, "a@example.com", []string{"b@example.org"}, []byte(message))
	var reply *textproto.Error
	if err == nil || errors.As(err, &reply) {
		t.Fatalf("send: %v, want a lost connection, not a reply", err)
	}
	msgs := s.Messages()
	if len(msgs) != 1 || msgs[0].Reply != "" || msgs[0].QueueID != "" {
		t.Fatalf("messages = %+v, want one, neither answered nor queued", msgs)
	}
}

// TestAuth: AUTH PLAIN with the one account; MAIL before it is refused when required.
func TestAuth(t *testing.T) {
	t.Parallel()
	s := start(t, Config{RequireAuth: true, Username: "u", Password: "p"})
	c, err := smtp.Dial(s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var reply *textproto.Error
	if err := c.Mail("a@example.com"); !errors.As(err, &reply) || reply.Code != 530 {
		t.Fatalf("MAIL before AUTH: %v, want 530", err)
	}
	if err := c.Auth(smtp.PlainAuth("", "u", "wrong", "127.0.0.1")); !errors.As(err, &reply) || reply.Code != 535 {
		t.Fatalf("AUTH with a wrong password: %v, want 535", err)
	}
	c2, err := smtp.Dial(s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	if err := c2.Auth(smtp.PlainAuth("", "u", "p", "127.0.0.1")); err != nil {
		t.Fatalf("AUTH: %v", err)
	}
	if err := c2.Mail("a@example.com"); err != nil {
		t.Fatalf("MAIL after AUTH: %v", err)
	}
}

// TestCloseEndsADelay: Close does not wait out a delayed reply.
func TestCloseEndsADelay(t *testing.T) {
	t.Parallel()
	delaying := make(chan struct{})
	var once sync.Once
	s, err := Start(Config{Behaviour: Behaviour{Delay: time.Hour}, Out: writerFunc(func(p []byte) (int, error) {
		if strings.Contains(string(p), "delaying") {
			once.Do(func() { close(delaying) })
		}
		return len(p), nil
	})})
	if err != nil {
		t.Fatal(err)
	}
	sent := make(chan error, 1)
	go func() {
		sent <- smtp.SendMail(s.Addr(), nil, "a@example.com", []string{"b@example.org"}, []byte(message))
	}()
	<-delaying
	if err := s.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := <-sent; err == nil {
		t.Error("the delayed send succeeded, want the connection closed")
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func TestStartRefuses(t *testing.T) {
	t.Parallel()
	for _, cfg := range []Config{
		{Addr: "0.0.0.0:0"},
		{Addr: "192.0.2.1:2525"},
		{Addr: "[::]:0"},
		{Addr: "mail.example.com:25"},
		{Addr: "127.0.0.1"},
		{Addr: "127.0.0.1:0", StartTLS: true, ImplicitTLS: true},
		{Addr: "127.0.0.1:0", RequireAuth: true},
		{Addr: "127.0.0.1:0", Behaviour: Behaviour{FailAt: StageRcpt, Code: 250}},
	} {
		if s, err := Start(cfg); err == nil {
			_ = s.Close()
			t.Errorf("Start(%+v) succeeded, want refused", cfg)
		}
	}
	for _, addr := range []string{"", ":0", "localhost:0"} {
		s, err := Start(Config{Addr: addr})
		if err != nil {
			t.Errorf("Start(%q): %v", addr, err)
			continue
		}
		if host, _, _ := net.SplitHostPort(s.Addr()); host != "127.0.0.1" {
			t.Errorf("Start(%q) listens on %s, want 127.0.0.1", addr, s.Addr())
		}
		_ = s.Close()
	}
}

func TestStartTLSCertificate(t *testing.T) {
	t.Parallel()
	if s := start(t, Config{}); s.CertPool() != nil {
		t.Error("CertPool without TLS is not nil")
	}
	s := start(t, Config{StartTLS: true})
	c, err := smtp.Dial(s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if ok, _ := c.Extension("STARTTLS"); !ok {
		t.Fatal("STARTTLS not offered")
	}
	for _, name := range []string{"127.0.0.1", "localhost"} {
		if _, err := s.tls.Certificates[0].Leaf.Verify(x509VerifyOptions(s, name)); err != nil {
			t.Errorf("the certificate does not verify for %s: %v", name, err)
		}
	}
}

func TestParseBehaviour(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]Behaviour{
		"":                              {},
		"fail=rcpt:451,times=1":         {FailAt: StageRcpt, Code: 451, Times: 1},
		"fail=data-end:550:5.7.1":       {FailAt: StageDataEnd, Code: 550, EnhancedCode: "5.7.1"},
		"fail=mail:421:4.3.2":           {FailAt: StageMail, Code: 421, EnhancedCode: "4.3.2"},
		"fail=data:554":                 {FailAt: StageData, Code: 554},
		"fail=rcpt:550:none":            {FailAt: StageRcpt, Code: 550, EnhancedCode: NoEnhancedCode},
		"drop-after-data":               {DropAfterData: true},
		"drop-during-data, times=2":     {DropDuringData: true, Times: 2},
		"delay=45s":                     {Delay: 45 * time.Second},
		"delay=500ms,fail=data-end:451": {FailAt: StageDataEnd, Code: 451, Delay: 500 * time.Millisecond},
	} {
		got, err := ParseBehaviour(in)
		if err != nil || got != want {
			t.Errorf("ParseBehaviour(%q) = %+v, %v; want %+v", in, got, err, want)
			continue
		}
		if again, err := ParseBehaviour(got.String()); err != nil || again != got {
			t.Errorf("ParseBehaviour(%q.String() = %q) = %+v, %v; want it back", in, got.String(), again, err)
		}
	}
	for _, in := range []string{
		"fail=rcpt", "fail=rcpt:abc", "fail=rcpt:250", "fail=rcpt:699", "fail=helo:451", "fail=rcpt:451:5.7.1",
		"fail=rcpt:451:4.7", "fail=rcpt:451,drop-after-data", "fail=data:451,delay=1s", "drop-after-data,drop-during-data",
		"drop-after-data,fail=data-end:554", "drop-during-data,delay=1s", "delay=soon", "delay=-1s", "times=0",
		"times=2", "drop-after-data=yes", "fail=rcpt:451,fail=mail:451", "bounce",
	} {
		if b, err := ParseBehaviour(in); err == nil {
			t.Errorf("ParseBehaviour(%q) = %+v, want an error", in, b)
		}
	}
}

func TestSetBehaviourPanicsOnInvalid(t *testing.T) {
	t.Parallel()
	s := start(t, Config{})
	defer func() {
		if recover() == nil {
			t.Error("SetBehaviour took an invalid behaviour")
		}
	}()
	s.SetBehaviour(Behaviour{FailAt: "helo", Code: 451})
}

func x509VerifyOptions(s *Server, name string) x509.VerifyOptions {
	return x509.VerifyOptions{Roots: s.CertPool(), DNSName: name}
}

// TestFailsPipelinedDATA: a client that pipelines MAIL, RCPT and DATA (go-smtp offers
// PIPELINING) still has its DATA answered with the failure, after the replies to the others.
func TestFailsPipelinedDATA(t *testing.T) {
	t.Parallel()
	s := start(t, Config{Behaviour: Behaviour{FailAt: StageData, Code: 451, EnhancedCode: "4.3.0"}})
	conn, err := textproto.Dial("tcp", s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, _, err := conn.ReadResponse(220); err != nil {
		t.Fatal(err)
	}
	if err := conn.PrintfLine("EHLO test\r\nMAIL FROM:<a@example.com>\r\nRCPT TO:<b@example.org>\r\nDATA"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []int{250, 250, 250, 451} {
		code, msg, err := conn.ReadResponse(0)
		if err != nil || code != want {
			t.Fatalf("reply %d %q (%v), want %d", code, msg, err, want)
		}
	}
	if err := conn.PrintfLine("QUIT"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := conn.ReadResponse(221); err != nil {
		t.Errorf("QUIT: %v", err)
	}
}

// TestCounts: every command is counted, refused ones included: a message refused at RCPT
// counts its MAIL and RCPT and no DATA, one refused at DATA counts its DATA, one dropped after
// its end counts its DATA once; a session that sends no transaction counts as a session only.
func TestCounts(t *testing.T) {
	t.Parallel()
	s := start(t, Config{Behaviour: Behaviour{FailAt: StageRcpt, Code: 550, EnhancedCode: "5.1.1", Times: 1}})
	send := func() error {
		return smtp.SendMail(s.Addr(), nil, "a@example.com", []string{"b@example.org"}, []byte(message))
	}
	if err := send(); err == nil {
		t.Fatal("send refused at RCPT succeeded")
	}
	if got, want := s.Counts(), (Counts{Sessions: 1, Mail: 1, Rcpt: 1}); got != want {
		t.Errorf("after a refusal at RCPT: %+v, want %+v", got, want)
	}
	s.SetBehaviour(Behaviour{FailAt: StageData, Code: 451, Times: 1})
	if err := send(); err == nil {
		t.Fatal("send refused at DATA succeeded")
	}
	s.SetBehaviour(Behaviour{DropAfterData: true, Times: 1})
	if err := send(); err == nil {
		t.Fatal("send dropped after data succeeded")
	}
	if err := send(); err != nil {
		t.Fatal(err)
	}
	c, err := smtp.Dial(s.Addr())
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Quit(); err != nil {
		t.Fatal(err)
	}
	if got, want := s.Counts(), (Counts{Sessions: 5, Mail: 4, Rcpt: 4, Data: 3}); got != want {
		t.Errorf("counts %+v, want %+v", got, want)
	}
	if n := len(s.Messages()); n != 2 {
		t.Errorf("%d messages, want the dropped one and the queued one", n)
	}
}

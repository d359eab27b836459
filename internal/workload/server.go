package workload

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Server accepts bulk, RPC and control connections on one listener.
type Server struct {
	// Delay is slept before each RPC reply (for tests of latency accounting).
	Delay time.Duration
	// IdleTimeout closes a connection that has sent nothing for this long
	// (default 60s), so a vanished client never pins a goroutine.
	IdleTimeout time.Duration
	// HelloTimeout bounds the wait for a connection's hello (default 5s).
	HelloTimeout time.Duration

	once     sync.Once
	start    time.Time
	mu       sync.Mutex
	sessions map[uint64]*session
	conns    map[net.Conn]struct{}
	wg       sync.WaitGroup

	// UDPUnknown counts datagrams of no known session (or too short).
	UDPUnknown atomic.Uint64
}

type session struct {
	refs                     int
	bulk, rpcReq, rpcReplied atomic.Uint64
	udpBytes, udpDatagrams   atomic.Uint64
}

func (s *Server) init() {
	s.once.Do(func() {
		if s.IdleTimeout == 0 {
			s.IdleTimeout = 60 * time.Second
		}
		if s.HelloTimeout == 0 {
			s.HelloTimeout = 5 * time.Second
		}
		s.mu.Lock()
		s.start = time.Now()
		s.sessions = map[uint64]*session{}
		s.conns = map[net.Conn]struct{}{}
		s.mu.Unlock()
	})
}

// ServeUDP counts the datagrams arriving on pc per session (see the package
// comment) until ctx is done or pc fails. The sessions are those of Serve's
// control connections, so a UDP client needs both on the same server.
func (s *Server) ServeUDP(ctx context.Context, pc net.PacketConn) error {
	s.init()
	if uc, ok := pc.(*net.UDPConn); ok {
		// Room for bursts: a sink that drops on its own would read as a limit.
		uc.SetReadBuffer(8 << 20)
		if raw, err := uc.SyscallConn(); err == nil {
			raw.Control(func(fd uintptr) { unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 8<<20) })
		}
	}
	stop := context.AfterFunc(ctx, func() { pc.Close() })
	defer stop()
	buf := make([]byte, 64<<10)
	var last uint64
	var ss *session
	for {
		n, _, err := pc.ReadFrom(buf)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if n < udpHeaderLen || [4]byte(buf[:4]) != udpMagic {
			s.UDPUnknown.Add(1)
			continue
		}
		id := binary.BigEndian.Uint64(buf[4:12])
		if ss == nil || id != last {
			s.mu.Lock()
			ss = s.sessions[id]
			s.mu.Unlock()
			last = id
		}
		if ss == nil {
			s.UDPUnknown.Add(1)
			continue
		}
		ss.udpBytes.Add(uint64(n))
		ss.udpDatagrams.Add(1)
	}
}

// Serve accepts connections on ln until ctx is done or ln fails, then closes
// every connection and returns once their goroutines have ended (bounded: all
// of them block only on their own, now closed, socket).
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	s.init()
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	var err error
	for {
		c, aerr := ln.Accept()
		if aerr != nil {
			if ctx.Err() == nil {
				var ne net.Error
				if errors.As(aerr, &ne) && ne.Timeout() {
					continue
				}
				err = aerr
			}
			break
		}
		s.mu.Lock()
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.handle(c)
			s.mu.Lock()
			delete(s.conns, c)
			s.mu.Unlock()
			c.Close()
		}()
	}
	ln.Close()
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return err
}

func (s *Server) since() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return time.Since(s.start)
}

func (s *Server) acquire(id uint64) *session {
	s.mu.Lock()
	defer s.mu.Unlock()
	ss := s.sessions[id]
	if ss == nil {
		ss = &session{}
		s.sessions[id] = ss
	}
	ss.refs++
	return ss
}

func (s *Server) release(id uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ss := s.sessions[id]; ss != nil {
		if ss.refs--; ss.refs <= 0 {
			delete(s.sessions, id)
		}
	}
}

func (s *Server) handle(c net.Conn) {
	c.SetReadDeadline(time.Now().Add(s.HelloTimeout))
	kind, id, err := readHello(c)
	if err != nil {
		return
	}
	ss := s.acquire(id)
	defer s.release(id)
	switch kind {
	case kindBulk:
		s.sink(c, ss)
	case kindRPC:
		s.rpc(c, ss)
	case kindControl:
		s.control(c, ss)
	}
}

// idleReader refreshes the read deadline at most once a second.
type idleReader struct {
	c    net.Conn
	idle time.Duration
	last time.Time
}

func (r *idleReader) Read(p []byte) (int, error) {
	if now := time.Now(); now.Sub(r.last) > time.Second {
		r.c.SetReadDeadline(now.Add(r.idle))
		r.last = now
	}
	return r.c.Read(p)
}

func (s *Server) sink(c net.Conn, ss *session) {
	r := &idleReader{c: c, idle: s.IdleTimeout}
	buf := make([]byte, 256<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			ss.bulk.Add(uint64(n))
		}
		if err != nil {
			return
		}
	}
}

func (s *Server) rpc(c net.Conn, ss *session) {
	r := &idleReader{c: c, idle: s.IdleTimeout}
	var hdr [rpcHeaderLen]byte
	buf := make([]byte, 64<<10)
	var reply []byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return
		}
		reqLen := binary.BigEndian.Uint32(hdr[0:4])
		repLen := binary.BigEndian.Uint32(hdr[4:8])
		if reqLen < rpcHeaderLen || reqLen > MaxRPCSize || repLen > MaxRPCSize {
			return
		}
		ss.rpcReq.Add(rpcHeaderLen)
		for left := int(reqLen) - rpcHeaderLen; left > 0; {
			n, err := r.Read(buf[:min(left, len(buf))])
			left -= n
			ss.rpcReq.Add(uint64(n))
			if err != nil {
				return
			}
		}
		if s.Delay > 0 {
			time.Sleep(s.Delay)
		}
		if int(repLen) > len(reply) {
			reply = make([]byte, repLen)
		}
		c.SetWriteDeadline(time.Now().Add(s.IdleTimeout))
		n, err := c.Write(reply[:repLen])
		ss.rpcReplied.Add(uint64(n))
		if err != nil {
			return
		}
	}
}

func (s *Server) control(c net.Conn, ss *session) {
	var cmd [1]byte
	var out [snapLenX]byte
	for {
		// A control connection stays quiet for the whole measurement.
		c.SetReadDeadline(time.Now().Add(s.IdleTimeout + time.Hour))
		if _, err := io.ReadFull(c, cmd[:]); err != nil {
			return
		}
		switch cmd[0] {
		case ctrlSnapshot, ctrlSnapX:
			binary.BigEndian.PutUint64(out[0:], uint64(s.since()))
			binary.BigEndian.PutUint64(out[8:], ss.bulk.Load())
			binary.BigEndian.PutUint64(out[16:], ss.rpcReq.Load())
			binary.BigEndian.PutUint64(out[24:], ss.rpcReplied.Load())
			binary.BigEndian.PutUint64(out[32:], ss.udpBytes.Load())
			binary.BigEndian.PutUint64(out[40:], ss.udpDatagrams.Load())
			n := snapLen
			if cmd[0] == ctrlSnapX {
				n = snapLenX
			}
			c.SetWriteDeadline(time.Now().Add(10 * time.Second))
			if _, err := c.Write(out[:n]); err != nil {
				return
			}
		case ctrlQuit:
			return
		default:
			return
		}
	}
}

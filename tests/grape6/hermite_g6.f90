! A GRAPE-6 host program in Fortran 90: 4th-order Hermite with block time steps, every force
! through the g6 Fortran interface (trailing underscore, arguments by reference), as NBODY4 or
! phiGRAPE call it. Particles sit at j-memory address i-1 with index i (1-based), so the
! index and the address differ, as in many Fortran codes.
!
!   hermite_g6_f hermite IC_FILE   integrate to t_end; print host float64 energies
!   hermite_g6_f forces  IC_FILE   forces at t = ti from j-particles predicted by the library,
!                                  nearest neighbours and neighbour lists within h2
! IC_FILE as for the C driver (tests/grape6/hermite_g6.c).
program hermite_g6_f
  implicit none
  integer, parameter :: dp = kind(1.0d0)
  integer(8), parameter :: ticks_per_dtmax = 2_8**40
  integer, external :: g6_open, g6_close, g6_npipes, g6_set_ti, g6_set_j_particle
  integer, external :: g6calc_lasthalf, g6calc_lasthalf2, g6_read_neighbour_list, g6_get_neighbour_list
  integer :: n, npipes, cid, ierr, i
  real(dp) :: eps2, eta, eta_s, dt_max, t_end, ti, h2all, tick
  real(dp), allocatable :: m(:), x(:,:), v(:,:), a(:,:), jk(:,:), pot(:)
  integer(8), allocatable :: t(:), dt(:)
  character(len=256) :: mode, path

  call get_command_argument(1, mode)
  call get_command_argument(2, path)
  open(unit=10, file=trim(path), status='old', action='read')
  read(10, *) n, eps2, eta, eta_s, dt_max, t_end, ti, h2all
  allocate(m(n), x(3,n), v(3,n), a(3,n), jk(3,n), pot(n), t(n), dt(n))
  do i = 1, n
    read(10, *) m(i), x(:,i), v(:,i)
  end do
  close(10)
  a = 0; jk = 0; pot = 0; t = 0; dt = 0
  tick = dt_max / real(ticks_per_dtmax, dp)
  cid = 0
  ierr = g6_open(cid)
  if (ierr /= 0) stop 3
  npipes = g6_npipes()
  if (trim(mode) == 'hermite') then
    call run_hermite()
  else
    call run_forces()
  end if
  ierr = g6_close(cid)

contains

  subroutine send_j(i)
    integer, intent(in) :: i
    real(dp) :: a2(3), j6(3), k18(3), tj, dtj
    integer :: addr
    a2 = a(:,i) / 2; j6 = jk(:,i) / 6; k18 = 0
    tj = real(t(i), dp) * tick; dtj = real(dt(i), dp) * tick
    addr = i - 1
    ierr = g6_set_j_particle(cid, addr, i, tj, dtj, m(i), k18, j6, a2, v(:,i), x(:,i))
    if (ierr /= 0) stop 4
  end subroutine send_j

  ! Forces on particles list(1:ni) at xi, vi, in chunks of npipes; nn present: lasthalf2.
  subroutine forces(ni, list, xi, vi, acc, jerk, p, h2v, nn)
    integer, intent(in) :: ni, list(:)
    real(dp), intent(in) :: xi(:,:), vi(:,:), h2v
    real(dp), intent(out) :: acc(:,:), jerk(:,:), p(:)
    integer, intent(out), optional :: nn(:)
    real(dp) :: h2(npipes), dummy(3, npipes)
    integer :: b, nb
    h2 = h2v; dummy = 0
    do b = 1, ni, npipes
      nb = min(npipes, ni - b + 1)
      call g6calc_firsthalf(cid, n, nb, list(b:), xi(:,b:), vi(:,b:), dummy, dummy, p(b:), eps2, h2)
      if (present(nn)) then
        ierr = g6calc_lasthalf2(cid, n, nb, list(b:), xi(:,b:), vi(:,b:), eps2, h2, acc(:,b:), jerk(:,b:), &
                                p(b:), nn(b:))
      else
        ierr = g6calc_lasthalf(cid, n, nb, list(b:), xi(:,b:), vi(:,b:), eps2, h2, acc(:,b:), jerk(:,b:), p(b:))
      end if
      if (ierr /= 0) stop 5
    end do
  end subroutine forces

  integer(8) function quantize(want, old, t_new)
    real(dp), intent(in) :: want
    integer(8), intent(in) :: old, t_new
    integer(8) :: d
    d = ticks_per_dtmax
    do while (d > 1 .and. real(d, dp) * tick > want)
      d = d / 2
    end do
    if (.not. (real(d, dp) * tick <= want)) stop 6
    if (old > 0 .and. d > old) then
      if (mod(t_new, 2 * old) == 0) then
        d = 2 * old
      else
        d = old
      end if
    end if
    quantize = d
  end function quantize

  real(dp) function energy()
    integer :: i, k
    real(dp) :: d(3)
    energy = 0
    do i = 1, n
      energy = energy + 0.5_dp * m(i) * sum(v(:,i)**2)
      do k = i + 1, n
        d = x(:,k) - x(:,i)
        energy = energy - m(i) * m(k) / sqrt(sum(d**2) + eps2)
      end do
    end do
  end function energy

  subroutine run_hermite()
    integer :: all(n), active(n), na, k, i, c
    real(dp) :: xp(3,n), vp(3,n), a1(3,n), j1(3,n), p1(n), e0, e1, h, hh, a2(3), a3(3), an, jn, sn, cn, want
    integer(8) :: t_block, t_stop, now, blocks, steps
    all = [(i, i = 1, n)]
    ierr = g6_set_ti(cid, 0.0_dp)
    do i = 1, n
      call send_j(i)
    end do
    call forces(n, all, x, v, a, jk, pot, 0.0_dp)
    do i = 1, n
      an = norm2(a(:,i)); jn = norm2(jk(:,i))
      if (jn > 0) then
        dt(i) = quantize(eta_s * an / jn, 0_8, 0_8)
      else
        dt(i) = quantize(dt_max, 0_8, 0_8)
      end if
      call send_j(i)
    end do
    e0 = energy()
    t_stop = nint(t_end / dt_max, 8) * ticks_per_dtmax
    now = 0; blocks = 0; steps = 0
    do while (now < t_stop)
      t_block = minval(t + dt)
      na = 0
      do i = 1, n
        if (t(i) + dt(i) == t_block) then
          na = na + 1; active(na) = i
        end if
      end do
      do k = 1, na
        i = active(k)
        h = real(t_block - t(i), dp) * tick
        xp(:,k) = x(:,i) + h * (v(:,i) + h * (0.5_dp * a(:,i) + h * jk(:,i) / 6))
        vp(:,k) = v(:,i) + h * (a(:,i) + 0.5_dp * h * jk(:,i))
      end do
      ierr = g6_set_ti(cid, real(t_block, dp) * tick)
      call forces(na, active, xp, vp, a1, j1, p1, 0.0_dp)
      do k = 1, na
        i = active(k)
        h = real(t_block - t(i), dp) * tick; hh = h * h
        do c = 1, 3
          a2(c) = (-6 * (a(c,i) - a1(c,k)) - h * (4 * jk(c,i) + 2 * j1(c,k))) / hh
          a3(c) = (12 * (a(c,i) - a1(c,k)) + 6 * h * (jk(c,i) + j1(c,k))) / (hh * h)
          x(c,i) = xp(c,k) + hh * hh * (a2(c) / 24 + h * a3(c) / 120)
          v(c,i) = vp(c,k) + hh * h * (a2(c) / 6 + h * a3(c) / 24)
          a(c,i) = a1(c,k); jk(c,i) = j1(c,k)
          a2(c) = a2(c) + h * a3(c)
        end do
        pot(i) = p1(k)
        an = norm2(a1(:,k)); jn = norm2(j1(:,k)); sn = norm2(a2); cn = norm2(a3)
        if (jn * cn + sn * sn > 0) then
          want = sqrt(eta * (an * sn + jn * jn) / (jn * cn + sn * sn))
        else
          want = dt_max
        end if
        dt(i) = quantize(want, dt(i), t_block)
        t(i) = t_block
      end do
      do k = 1, na
        call send_j(active(k))
      end do
      now = t_block; blocks = blocks + 1; steps = steps + na
    end do
    e1 = energy()
    write(*, '(a,i0)') 'N ', n
    write(*, '(a,i0)') 'blocks ', blocks
    write(*, '(a,i0)') 'steps ', steps
    write(*, '(a,es25.17)') 'E0 ', e0
    write(*, '(a,es25.17)') 'E1 ', e1
    do i = 1, n
      write(*, '(a,i0,6es25.17)') 'X ', i - 1, x(:,i), v(:,i)
    end do
  end subroutine run_hermite

  subroutine run_forces()
    integer, external :: gravpipe_g6_get_nearest_r2
    integer :: all(n), nn(n), nbl(n), len, k, q, i, b, nb, status
    real(dp) :: xp(3,n), vp(3,n), a1(3,n), j1(3,n), p1(n), r2(n), h2(npipes), dummy(3, npipes)
    all = [(i, i = 1, n)]
    ierr = g6_set_ti(cid, 0.0_dp)
    do i = 1, n
      call send_j(i)
    end do
    call forces(n, all, x, v, a, jk, pot, 0.0_dp)
    do i = 1, n
      call send_j(i)
      xp(:,i) = x(:,i) + ti * (v(:,i) + ti * (a(:,i) / 2 + ti * jk(:,i) / 6))
      vp(:,i) = v(:,i) + ti * (2 * (a(:,i) / 2) + ti * 3 * (jk(:,i) / 6))
    end do
    ierr = g6_set_ti(cid, ti)
    h2 = h2all; dummy = 0
    do b = 1, n, npipes
      nb = min(npipes, n - b + 1)
      call g6calc_firsthalf(cid, n, nb, all(b:), xp(:,b:), vp(:,b:), dummy, dummy, p1(b:), eps2, h2)
      ierr = g6calc_lasthalf2(cid, n, nb, all(b:), xp(:,b:), vp(:,b:), eps2, h2, a1(:,b:), j1(:,b:), p1(b:), nn(b:))
      if (ierr /= 0) stop 5
      if (gravpipe_g6_get_nearest_r2(cid, nb, r2(b:)) /= 0) stop 5
      status = g6_read_neighbour_list(cid)
      do k = 1, nb
        i = b + k - 1
        ierr = g6_get_neighbour_list(cid, k - 1, n, len, nbl)
        ! indices are 1-based here: print 0-based particle numbers, as the C driver does
        write(*, '(a,i0,13es25.17,1x,i0,es25.17,2(1x,i0))', advance='no') 'F1 ', i - 1, xp(:,i), vp(:,i), &
            a1(:,i), j1(:,i), p1(i), nn(i) - 1, r2(i), ior(status, ierr), len
        do q = 1, min(len, n)
          write(*, '(1x,i0)', advance='no') nbl(q) - 1
        end do
        write(*, '(a)') ''
      end do
    end do
  end subroutine run_forces

end program hermite_g6_f

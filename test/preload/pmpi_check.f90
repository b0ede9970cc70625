! An ordinary Fortran MPI program (`use mpi`) for the preload library's test: a REAL sum
! all-reduce into a second array and one in place (MPI_IN_PLACE). Prints on rank 0 the largest
! difference between the two results relative to the sum over ranks of max |input|, and the
! largest difference from the exact sum on the same scale.
program pmpi_check_f
  use mpi
  implicit none
  integer :: ierr, rank, nranks, i, r
  real :: x(5000), y(5000)
  double precision :: exact(5000), norm
  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nranks, ierr)
  exact = 0
  norm = 0
  do r = 0, nranks - 1
    do i = 1, 5000
      exact(i) = exact(i) + real(sin(0.37d0 * i + r))
    end do
    norm = norm + maxval([(abs(real(sin(0.37d0 * i + r))), i = 1, 5000)])
  end do
  do i = 1, 5000
    x(i) = real(sin(0.37d0 * i + rank))
  end do
  call MPI_Allreduce(x, y, 5000, MPI_REAL, MPI_SUM, MPI_COMM_WORLD, ierr)
  call MPI_Allreduce(MPI_IN_PLACE, x, 5000, MPI_REAL, MPI_SUM, MPI_COMM_WORLD, ierr)
  if (rank == 0) then
    print '(a, es10.3)', 'inplace_vs_not ', maxval(abs(dble(x) - dble(y))) / norm
    print '(a, es10.3)', 'error ', max(maxval(abs(dble(x) - exact)), maxval(abs(dble(y) - exact))) / norm
  end if
  call MPI_Finalize(ierr)
end program

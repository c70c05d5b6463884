my $h = '';
if (open my $f, '<:raw', '/proc/self/exe') { read $f, $h, 20 }
my $m = length $h == 20 ? unpack(ord(substr($h, 5, 1)) == 2 ? 'n' : 'v', substr($h, 18, 2)) : 0;
my %prctl = (62 => 157, 183 => 167, 243 => 167, 21 => 171, 22 => 172);
for my $v (qw(PERL_BADLANG PERL5OPT PERL_HASH_SEED_DEBUG)) {
  my $was = delete $ENV{"HERD_$v"};
  if (length $was) { $ENV{$v} = substr($was, 1) } else { delete $ENV{$v} }
}
if ($prctl{$m}) { syscall($prctl{$m}, 36, 1, 0, 0, 0) }
elsif (-x $py) { unshift @ARGV, $py, qw(-S -I -c), $shim }
exec { $ARGV[0] } @ARGV;
die "herd-agent: cannot run $ARGV[0]: $!\n";

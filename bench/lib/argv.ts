// A bench script's numeric option: `--name N` on its command line, else the fallback.

export function numberArg(name: string, fallback: number, argv: readonly string[] = process.argv.slice(2)): number {
  const at = argv.indexOf(`--${name}`);
  return at >= 0 ? Number(argv[at + 1]) : fallback;
}

// StandIn plays an upstream installer jar (Forge/NeoForge `--installServer`,
// quilt-installer `install server …`) in the installer tests: the real jars
// cannot be fetched there. The test compiles this file, packs it into a jar
// with a plan (kiln-standin/plan.txt) and serves that jar as the installer.
// Plan lines, in order:
//   args <the exact arguments expected, space-separated>
//   absent <path>      fail (exit 4) if <path> exists: the tree a clean
//                      reinstall must have removed before the run
//   file <path>\t<text> write <text> (\n escapes) to <path>, parents made
//   print <line>       print <line> to stdout
//   exit <code>        exit with <code> after the plan
public final class StandIn {
    public static void main(String[] args) throws Exception {
        java.util.List<String> plan = new java.util.ArrayList<>();
        try (java.io.InputStream in = StandIn.class.getResourceAsStream("/kiln-standin/plan.txt")) {
            if (in == null) {
                System.err.println("stand-in: no plan in the jar");
                System.exit(3);
            }
            java.io.BufferedReader r = new java.io.BufferedReader(
                new java.io.InputStreamReader(in, java.nio.charset.StandardCharsets.UTF_8));
            for (String l; (l = r.readLine()) != null; ) {
                plan.add(l);
            }
        }
        String got = "args " + String.join(" ", args);
        if (plan.isEmpty() || !plan.get(0).equals(got)) {
            System.err.println("stand-in: expected '" + (plan.isEmpty() ? "" : plan.get(0)) + "', got '" + got + "'");
            System.exit(2);
        }
        int exit = 0;
        for (String l : plan.subList(1, plan.size())) {
            if (l.startsWith("absent ")) {
                java.nio.file.Path p = java.nio.file.Paths.get(l.substring(7));
                if (java.nio.file.Files.exists(p, java.nio.file.LinkOption.NOFOLLOW_LINKS)) {
                    System.err.println("stand-in: " + p + " is still there");
                    System.exit(4);
                }
            } else if (l.startsWith("file ")) {
                int tab = l.indexOf('\t');
                java.nio.file.Path p = java.nio.file.Paths.get(l.substring(5, tab));
                if (p.getParent() != null) {
                    java.nio.file.Files.createDirectories(p.getParent());
                }
                java.nio.file.Files.write(p, l.substring(tab + 1).replace("\\n", "\n")
                    .getBytes(java.nio.charset.StandardCharsets.UTF_8));
            } else if (l.startsWith("print ")) {
                System.out.println(l.substring(6));
            } else if (l.startsWith("exit ")) {
                exit = Integer.parseInt(l.substring(5).trim());
            }
        }
        System.exit(exit);
    }
}

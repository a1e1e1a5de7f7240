# Sourced by local.sh and hostfile.sh: tessera_mca, the array of "--mca NAME VALUE" for every
# setting of mca-params.conf beside this file.
tessera_mca=()
# mca-params.conf beside this file, found without a `dirname` process (see local.sh).
tessera_mca_file=${BASH_SOURCE[0]%/*}
[ "$tessera_mca_file" = "${BASH_SOURCE[0]}" ] && tessera_mca_file=.
tessera_mca_file+=/mca-params.conf
while read -r line || [ -n "$line" ]; do
  line=${line%%#*}
  [[ "$line" =~ ^[[:space:]]*$ ]] && continue
  if ! [[ "$line" =~ ^[[:space:]]*([A-Za-z0-9_]+)[[:space:]]*=[[:space:]]*([^[:space:]]+)[[:space:]]*$ ]]; then
    echo "mca_flags.sh: not 'name = value' in $tessera_mca_file: '$line'" >&2
    exit 2
  fi
  tessera_mca+=(--mca "${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}")
done < "$tessera_mca_file"

// Package gameserver runs the game servers of one node.
package gameserver
